// A small SVG writer: what the plots write their pictures with (`sublinear report --plot`,
// runtime/report/report_plot.cpp; `sublinear bench --plots`, integrations/cli/bench/
// sweep_plots.cpp).
//
// Note [SVG writer]
// Rationale: plots written by string concatenation each carry their own escaping and
//   number formatting, and one forgotten escape is a file no browser opens (a model named
//   "R&D"). One writer escapes every text and attribute value it is given, formats every
//   number the same way, and closes what it opens, so a plot states only what it draws.
// Approach: an svg_document appends elements in paint order (later ones draw on top). A
//   primitive takes its geometry as numbers and everything else as attributes, name and
//   value: text is escaped when written, a number formatted by svg_number (at most two
//   decimals, trailing zeros dropped), and an empty value leaves the attribute out, so an
//   optional one ("stroke-dasharray") needs no second call. An element's id comes first,
//   then its geometry, then the other attributes as given; a <g> indents what it holds
//   by two spaces. svg_path builds path data (one decimal per coordinate), svg_scale maps
//   data to pixels (linear or log), svg_box is a plot area, and the document's gridline
//   helpers draw one tick: its grid line across the area and its label outside.
// Limitations: no layout: each plot places its own title, axes and legend, and picks its
//   own ticks. Attribute names are not checked.
#pragma once

#include <concepts>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace sublinear {

// `text` with &, <, >, " and ' replaced by their entities: safe as element text and as
// an attribute value.
[[nodiscard]] std::string svg_escape(std::string_view text);

// `v` with at most two decimals and no trailing zeros: "72", "218.57", "-0.5".
[[nodiscard]] std::string svg_number(double v);

// One attribute. The value is kept as written (text) or formatted (a number); the
// document escapes it, and leaves the attribute out when the value is empty.
struct svg_attr {
  svg_attr(std::string_view attr_name, std::string_view text) : name(attr_name), value(text) {}
  svg_attr(std::string_view attr_name, const char* text) : name(attr_name), value(text) {}
  svg_attr(std::string_view attr_name, const std::string& text) : name(attr_name), value(text) {}
  template <class T>
    requires(std::integral<T> || std::floating_point<T>) && (!std::same_as<T, bool>) && (!std::same_as<T, char>)
  svg_attr(std::string_view attr_name, T number) : name(attr_name), value(svg_number(static_cast<double>(number))) {}

  std::string name;
  std::string value;
};
using svg_attrs = std::initializer_list<svg_attr>;

// Maps [from_lo, from_hi] onto [to_lo, to_hi] (to_lo > to_hi for a y axis, which grows
// downwards): linearly, or with `log` by the logarithm (every value then > 0).
struct svg_scale {
  double from_lo = 0, from_hi = 1;
  double to_lo = 0, to_hi = 1;
  bool log = false;

  [[nodiscard]] double operator()(double v) const;
};

// Path data ("M10.0,20.0 L30.0,40.0 H50.0 V60.0"), absolute coordinates, one decimal.
class svg_path {
 public:
  svg_path& move_to(double x, double y);
  svg_path& line_to(double x, double y);  // a move when the path is still empty
  svg_path& horizontal_to(double x);
  svg_path& vertical_to(double y);
  [[nodiscard]] bool empty() const noexcept { return d_.empty(); }
  [[nodiscard]] const std::string& str() const noexcept { return d_; }

 private:
  std::string d_;
};

// A rectangle in pixels: the plot area inside a picture's margins.
struct svg_box {
  double left = 0, top = 0, width = 0, height = 0;
  [[nodiscard]] double right() const noexcept { return left + width; }
  [[nodiscard]] double bottom() const noexcept { return top + height; }
};

class svg_document {
 public:
  // <?xml ...?> and the <svg> root, `width` x `height` pixels (viewBox to match), with
  // `root` added to it (font-family, font-size: inherited by every text), then a
  // background rectangle filled with `background` ("": none).
  svg_document(double width, double height, svg_attrs root = {}, std::string_view background = "#ffffff");

  void line(double x1, double y1, double x2, double y2, svg_attrs attrs = {});
  void rect(double x, double y, double width, double height, svg_attrs attrs = {});
  void circle(double cx, double cy, double r, svg_attrs attrs = {});
  void path(const svg_path& d, svg_attrs attrs = {});
  // Text with its anchor point at (x, y); `content` is escaped.
  void text(double x, double y, std::string_view content, svg_attrs attrs = {});
  // Text turned a quarter counterclockwise about (x, y), for a y-axis label.
  void vertical_text(double x, double y, std::string_view content, svg_attrs attrs = {});

  // Axes: a vertical grid line across `plot` at x with `label` centred `label_below`
  // pixels under the plot, or a horizontal one at y with `label` right-aligned
  // `label_left` pixels left of it. `stroke` colours the line.
  void x_gridline(const svg_box& plot, double x, std::string_view label, std::string_view stroke, double label_below);
  void y_gridline(const svg_box& plot, double y, std::string_view label, std::string_view stroke, double label_left);

  // <g> with `attrs` (an id, a font-size its texts inherit) around what follows, up to
  // the matching end_group().
  void begin_group(svg_attrs attrs = {});
  void end_group();

  // The document, every open group and the root closed. Call once.
  [[nodiscard]] std::string finish();

 private:
  struct geometry {
    const char* name;
    double value;
  };
  void element(std::string_view tag, std::initializer_list<geometry> geo, svg_attrs attrs, std::string_view content,
               bool has_content);
  void open_tag(std::string_view tag, std::initializer_list<geometry> geo, svg_attrs attrs);
  void indent();

  std::string out_;
  int depth_ = 1;  // inside the root
};

}  // namespace sublinear
