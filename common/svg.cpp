// Note [SVG writer] is in svg.hpp.
#include "common/svg.hpp"

#include <cmath>
#include <cstdio>
#include <utility>

namespace sublinear {

namespace {

std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::string svg_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string svg_number(double v) {
  std::string s = fixed(v, 2);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

double svg_scale::operator()(double v) const {
  const double t = log ? std::log(v / from_lo) / std::log(from_hi / from_lo) : (v - from_lo) / (from_hi - from_lo);
  return to_lo + (to_hi - to_lo) * t;
}

svg_path& svg_path::move_to(double x, double y) {
  d_ += (d_.empty() ? "M" : " M") + fixed(x, 1) + "," + fixed(y, 1);
  return *this;
}

svg_path& svg_path::line_to(double x, double y) {
  if (d_.empty()) return move_to(x, y);
  d_ += " L" + fixed(x, 1) + "," + fixed(y, 1);
  return *this;
}

svg_path& svg_path::horizontal_to(double x) {
  d_ += " H" + fixed(x, 1);
  return *this;
}

svg_path& svg_path::vertical_to(double y) {
  d_ += " V" + fixed(y, 1);
  return *this;
}

svg_document::svg_document(double width, double height, svg_attrs root, std::string_view background) {
  out_ = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         svg_number(width) + "\" height=\"" + svg_number(height) + "\" viewBox=\"0 0 " + svg_number(width) + " " +
         svg_number(height) + "\"";
  for (const auto& a : root)
    if (!a.value.empty()) out_ += " " + a.name + "=\"" + svg_escape(a.value) + "\"";
  out_ += ">\n";
  if (!background.empty()) rect(0, 0, width, height, {{"fill", background}});
}

void svg_document::indent() { out_.append(2 * static_cast<std::size_t>(depth_), ' '); }

void svg_document::open_tag(std::string_view tag, std::initializer_list<geometry> geo, svg_attrs attrs) {
  indent();
  out_ += "<";
  out_ += tag;
  for (const auto& a : attrs)
    if (a.name == "id" && !a.value.empty()) out_ += " id=\"" + svg_escape(a.value) + "\"";
  for (const auto& g : geo) out_ += std::string(" ") + g.name + "=\"" + svg_number(g.value) + "\"";
  for (const auto& a : attrs)
    if (a.name != "id" && !a.value.empty()) out_ += " " + a.name + "=\"" + svg_escape(a.value) + "\"";
}

void svg_document::element(std::string_view tag, std::initializer_list<geometry> geo, svg_attrs attrs,
                           std::string_view content, bool has_content) {
  open_tag(tag, geo, attrs);
  if (!has_content) {
    out_ += "/>\n";
    return;
  }
  out_ += ">" + svg_escape(content) + "</";
  out_ += tag;
  out_ += ">\n";
}

void svg_document::line(double x1, double y1, double x2, double y2, svg_attrs attrs) {
  element("line", {{"x1", x1}, {"y1", y1}, {"x2", x2}, {"y2", y2}}, attrs, {}, false);
}

void svg_document::rect(double x, double y, double width, double height, svg_attrs attrs) {
  element("rect", {{"x", x}, {"y", y}, {"width", width}, {"height", height}}, attrs, {}, false);
}

void svg_document::circle(double cx, double cy, double r, svg_attrs attrs) {
  element("circle", {{"cx", cx}, {"cy", cy}, {"r", r}}, attrs, {}, false);
}

void svg_document::path(const svg_path& d, svg_attrs attrs) {
  open_tag("path", {}, attrs);
  out_ += " d=\"" + d.str() + "\"/>\n";
}

void svg_document::text(double x, double y, std::string_view content, svg_attrs attrs) {
  element("text", {{"x", x}, {"y", y}}, attrs, content, true);
}

void svg_document::vertical_text(double x, double y, std::string_view content, svg_attrs attrs) {
  open_tag("text", {}, attrs);
  out_ += " transform=\"translate(" + svg_number(x) + "," + svg_number(y) + ") rotate(-90)\">" +
          svg_escape(content) + "</text>\n";
}

void svg_document::x_gridline(const svg_box& plot, double x, std::string_view label, std::string_view stroke,
                              double label_below) {
  line(x, plot.top, x, plot.bottom(), {{"stroke", stroke}});
  text(x, plot.bottom() + label_below, label, {{"text-anchor", "middle"}});
}

void svg_document::y_gridline(const svg_box& plot, double y, std::string_view label, std::string_view stroke,
                              double label_left) {
  line(plot.left, y, plot.right(), y, {{"stroke", stroke}});
  text(plot.left - label_left, y + 4, label, {{"text-anchor", "end"}});  // centred on the line at 12 px
}

void svg_document::begin_group(svg_attrs attrs) {
  open_tag("g", {}, attrs);
  out_ += ">\n";
  ++depth_;
}

void svg_document::end_group() {
  if (depth_ <= 1) return;
  --depth_;
  indent();
  out_ += "</g>\n";
}

std::string svg_document::finish() {
  while (depth_ > 1) end_group();
  out_ += "</svg>\n";
  return std::move(out_);
}

}  // namespace sublinear
