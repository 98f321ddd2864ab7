// The SVG writer (common/svg.hpp, Note [SVG writer]): escaping, number formatting,
// attribute order, optional attributes and closing what was opened.
#include "common/svg.hpp"

#include <gtest/gtest.h>

#include <string>

namespace sublinear {
namespace {

TEST(SvgWriter, EscapesTheFiveXmlCharacters) {
  EXPECT_EQ(svg_escape("R&D <a> \"b\" 'c'"), "R&amp;D &lt;a&gt; &quot;b&quot; &apos;c&apos;");
  EXPECT_EQ(svg_escape("plain"), "plain");
}

TEST(SvgWriter, NumbersHaveAtMostTwoDecimals) {
  EXPECT_EQ(svg_number(72), "72");
  EXPECT_EQ(svg_number(218.5714), "218.57");
  EXPECT_EQ(svg_number(1.5), "1.5");
  EXPECT_EQ(svg_number(-0.001), "0");
  EXPECT_EQ(svg_number(-2.25), "-2.25");
}

TEST(SvgWriter, WritesIdFirstEscapesValuesAndLeavesEmptyOnesOut) {
  svg_document doc(100, 50, {{"font-size", 12}});
  doc.line(1, 2, 3.25, 4, {{"stroke", "#333"}, {"stroke-dasharray", ""}, {"id", "a&b"}});
  doc.text(5, 6, "x < y", {{"text-anchor", "end"}});
  const std::string svg = doc.finish();
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100\" height=\"50\" viewBox=\"0 0 100 50\" "
                     "font-size=\"12\">"),
            std::string::npos);
  EXPECT_NE(svg.find("<rect x=\"0\" y=\"0\" width=\"100\" height=\"50\" fill=\"#ffffff\"/>"), std::string::npos);
  EXPECT_NE(svg.find("<line id=\"a&amp;b\" x1=\"1\" y1=\"2\" x2=\"3.25\" y2=\"4\" stroke=\"#333\"/>"), std::string::npos);
  EXPECT_NE(svg.find("<text x=\"5\" y=\"6\" text-anchor=\"end\">x &lt; y</text>"), std::string::npos);
  EXPECT_EQ(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(SvgWriter, ClosesOpenGroupsAndIndentsTheirContent) {
  svg_document doc(10, 10, {}, "");
  doc.begin_group({{"id", "outer"}});
  doc.begin_group();
  doc.circle(1, 2, 3);
  const std::string svg = doc.finish();
  EXPECT_EQ(svg.find("<rect"), std::string::npos);  // no background asked for
  EXPECT_NE(svg.find("\n  <g id=\"outer\">\n    <g>\n      <circle cx=\"1\" cy=\"2\" r=\"3\"/>\n    </g>\n  </g>\n</svg>\n"),
            std::string::npos);
}

TEST(SvgWriter, PathsAndScales) {
  svg_path d;
  d.line_to(1, 2).horizontal_to(3.14159).vertical_to(4).line_to(5, 6);
  EXPECT_EQ(d.str(), "M1.0,2.0 H3.1 V4.0 L5.0,6.0");
  const svg_scale y{0, 10, 100, 0};  // a y axis: larger values higher up
  EXPECT_DOUBLE_EQ(y(0), 100);
  EXPECT_DOUBLE_EQ(y(2.5), 75);
  const svg_scale x{1, 100, 0, 200, true};
  EXPECT_NEAR(x(10), 100, 1e-9);
}

}  // namespace
}  // namespace sublinear
