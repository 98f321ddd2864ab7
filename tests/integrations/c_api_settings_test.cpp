// The C API's settings and version entry points: one parser (runtime/settings.cpp) answers
// sublinear_check_setting for every caller, the Python package included.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/settings.hpp"
#include "sublinear/sublinear.h"

namespace sublinear::runtime {
namespace {

using ::testing::HasSubstr;

TEST(CApiSettings, AcceptsWhatTheRuntimeReads) {
  EXPECT_EQ(sublinear_check_setting("SUBLINEAR_BUDGET", "8GiB"), 0);
  EXPECT_EQ(sublinear_check_setting("SUBLINEAR_BUDGET", "0.5x"), 0);
  EXPECT_EQ(sublinear_check_setting("SUBLINEAR_BUDGET", ""), 0);  // unset
  EXPECT_EQ(sublinear_check_setting("SUBLINEAR_POLICY", "chain"), 0);
  EXPECT_EQ(sublinear_check_setting("SUBLINEAR_LOG", "info:/tmp/log"), 0);
  EXPECT_EQ(sublinear_check_setting("SUBLINEAR_DISABLE", "yes"), 0);
}

TEST(CApiSettings, RefusesAMalformedValueWithTheRuntimesMessage) {
  ASSERT_EQ(sublinear_check_setting("SUBLINEAR_BUDGET", "8G"), -1);
  std::string why = sublinear_last_error();
  EXPECT_THAT(why, HasSubstr("SUBLINEAR_BUDGET='8G'"));
  EXPECT_THAT(why, HasSubstr("write GiB or GB"));
  ASSERT_EQ(sublinear_check_setting("SUBLINEAR_VALIDATE", "sometimes"), -1);
  why = sublinear_last_error();
  EXPECT_THAT(why, HasSubstr("SUBLINEAR_VALIDATE='sometimes'"));
  EXPECT_THAT(why, HasSubstr("off, first, always"));
  EXPECT_EQ(sublinear_check_setting("SUBLINEAR_POLICY", ""), -1);
}

TEST(CApiSettings, AnUnknownNameListsTheSettingsAndScriptVariablesPass) {
  ASSERT_EQ(sublinear_check_setting("SUBLINEAR_BUGDET", "8GiB"), -1);
  EXPECT_THAT(sublinear_last_error(), HasSubstr("unknown setting SUBLINEAR_BUGDET; the settings are: SUBLINEAR_BUDGET"));
  ASSERT_EQ(sublinear_check_setting("BUDGET", "8GiB"), -1);
  EXPECT_THAT(sublinear_last_error(), HasSubstr("unknown setting BUDGET"));
  EXPECT_EQ(sublinear_check_setting("SUBLINEAR_ROOT", "/src"), 0);
  EXPECT_EQ(sublinear_check_setting(nullptr, "x"), -1);
}

TEST(CApiSettings, TheTableIsTheRuntimesInOrder) {
  const auto& table = options_table();
  for (std::size_t i = 0; i < table.size(); ++i) {
    const char* name = nullptr;
    const char* forms = nullptr;
    int is_switch = -1;
    ASSERT_EQ(sublinear_setting_info(i, &name, &forms, &is_switch), 0);
    EXPECT_STREQ(name, table[i].name);
    EXPECT_STREQ(forms, table[i].forms);
    EXPECT_EQ(is_switch, table[i].boolean ? 1 : 0);
  }
  EXPECT_EQ(sublinear_setting_info(table.size(), nullptr, nullptr, nullptr), -1);
}

TEST(CApiVersion, TheLibraryIsTheHeadersVersion) {
  EXPECT_STREQ(sublinear_version(), SUBLINEAR_VERSION_STRING);
  EXPECT_EQ(std::string(SUBLINEAR_VERSION_STRING), std::to_string(SUBLINEAR_VERSION_MAJOR) + "." +
                                                       std::to_string(SUBLINEAR_VERSION_MINOR) + "." +
                                                       std::to_string(SUBLINEAR_VERSION_PATCH));
}

}  // namespace
}  // namespace sublinear::runtime
