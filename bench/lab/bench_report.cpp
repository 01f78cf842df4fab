// Table, JSON and SVG of `tensorpc bench` figures (bench_report.h).
#include "lab/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/format.h"

namespace tensorpc::tools {
namespace {

std::string printf_string(const char* format, double v) {
  char s[64];
  std::snprintf(s, sizeof s, format, v);
  return s;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// JSON has no NaN or infinity: they become null.
std::string json_number(double v) { return std::isfinite(v) ? printf_string("%.6g", v) : "null"; }

std::string xml_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// " [0.80-0.93]": the repetitions' spread of a figure that has one, else "".
std::string spread_text(const Figure& f) {
  if (!(f.ratio_high > 0)) return "";
  return printf_string(" [%.2f-", f.ratio_low) + printf_string("%.2f]", f.ratio_high);
}

}  // namespace

double Figure::against_target() const {
  if (!target || target->limit <= 0) return 0;
  return (target->on_ratio ? ratio() : value) / target->limit;
}

bool Figure::met() const {
  if (!target) return true;
  const double q = target->on_ratio ? ratio() : value;
  return target->bound == Target::Bound::at_most ? q <= target->limit : q >= target->limit;
}

std::string Figure::target_text() const {
  if (!target) return "";
  const std::string bound = target->bound == Target::Bound::at_most ? "<= " : ">= ";
  if (target->on_ratio) return bound + printf_string("%.2fx", target->limit);
  return bound + format_value(target->limit, unit);
}

std::string format_value(double value, const std::string& unit) {
  if (unit == "B") return format_bytes(value);
  if (unit == "B/token") return format_bytes(value) + "/token";
  const char* format = std::fabs(value) >= 100 ? "%.1f" : std::fabs(value) >= 10 ? "%.2f" : "%.3g";
  return printf_string(format, value) + " " + unit;
}

std::pair<double, double> ratio_range(const std::vector<double>& values, const std::vector<double>& baselines) {
  std::pair<double, double> range{0, 0};
  bool any = false;
  for (size_t i = 0; i < std::min(values.size(), baselines.size()); ++i) {
    if (!(baselines[i] > 0)) continue;
    const double r = values[i] / baselines[i];
    range = any ? std::pair{std::min(range.first, r), std::max(range.second, r)} : std::pair{r, r};
    any = true;
  }
  return range;
}

std::string format_table(const std::vector<Figure>& figures) {
  size_t width = 6;
  for (const Figure& f : figures) width = std::max(width, f.name.size());
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %14s  %14s  %-22s %19s  %-12s %s\n", static_cast<int>(width), "figure",
                "value", "baseline", "(baseline is)", "ratio", "target", "");
  out += line;
  for (const Figure& f : figures) {
    const std::string baseline = f.baseline > 0 ? format_value(f.baseline, f.unit) : "";
    const std::string ratio = f.baseline > 0 ? printf_string("%.2fx", f.ratio()) + spread_text(f) : "";
    const char* verdict = !f.target ? "" : f.met() ? "met" : "MISSED";
    std::snprintf(line, sizeof line, "%-*s  %14s  %14s  %-22s %19s  %-12s %s\n", static_cast<int>(width),
                  f.name.c_str(), format_value(f.value, f.unit).c_str(), baseline.c_str(), f.baseline_name.c_str(),
                  ratio.c_str(), f.target_text().c_str(), verdict);
    out += line;
  }
  return out;
}

std::string format_json(const std::vector<Figure>& figures, const std::vector<std::string>& settings) {
  std::string out = "{\n";
  for (const std::string& s : settings) out += "  " + s + ",\n";
  out += "  \"figures\": [\n";
  for (size_t i = 0; i < figures.size(); ++i) {
    const Figure& f = figures[i];
    out += "    {\"id\": " + json_string(f.id) + ", \"name\": " + json_string(f.name) +
           ", \"value\": " + json_number(f.value) + ", \"unit\": " + json_string(f.unit);
    if (f.baseline > 0) {
      out += ", \"baseline\": " + json_number(f.baseline) + ", \"baseline_name\": " + json_string(f.baseline_name) +
             ", \"ratio\": " + json_number(f.ratio());
      if (f.ratio_high > 0)
        out += ", \"ratio_low\": " + json_number(f.ratio_low) + ", \"ratio_high\": " + json_number(f.ratio_high);
    }
    if (f.target) {
      out += ", \"target\": " + json_string(f.target_text()) + ", \"met\": " + (f.met() ? "true" : "false");
    }
    out += i + 1 < figures.size() ? "},\n" : "}\n";
  }
  return out + "  ]\n}\n";
}

std::string format_svg(const std::vector<Figure>& figures, const std::string& title) {
  std::vector<const Figure*> shown;
  for (const Figure& f : figures) {
    if (f.target && std::isfinite(f.against_target())) shown.push_back(&f);
  }
  // Bars are drawn to 2.5× the target at most; longer ones are cut and say so.
  constexpr double kMax = 2.5;
  constexpr int kLabel = 560, kPlot = 420, kRow = 22, kTop = 50;
  const int width = kLabel + kPlot + 180, height = kTop + kRow * static_cast<int>(shown.size()) + 40;
  auto x_of = [&](double v) { return kLabel + static_cast<int>(std::min(v, kMax) / kMax * kPlot); };
  std::string out;
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
         std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<text x=\"10\" y=\"20\" font-size=\"15\">" + xml_text(title) + "</text>\n";
  out +=
      "<text x=\"10\" y=\"38\" fill=\"#555\">each bar: the figure over its target (the line at 1); green met, red "
      "missed; a whisker: the lowest and highest repetition</text>\n";
  for (size_t i = 0; i < shown.size(); ++i) {
    const Figure& f = *shown[i];
    const int y = kTop + kRow * static_cast<int>(i);
    const double v = f.against_target();
    const std::string colour = f.met() ? "#3a9a4a" : "#d04040";
    out += "<text x=\"" + std::to_string(kLabel - 6) + "\" y=\"" + std::to_string(y + 14) + "\" text-anchor=\"end\">" +
           xml_text(f.name) + "</text>\n";
    out += "<rect x=\"" + std::to_string(kLabel) + "\" y=\"" + std::to_string(y + 3) + "\" width=\"" +
           std::to_string(std::max(1, x_of(v) - kLabel)) + "\" height=\"" + std::to_string(kRow - 6) + "\" fill=\"" +
           colour + "\"/>\n";
    std::string quantity = f.target->on_ratio ? printf_string("%.2fx", f.ratio()) : format_value(f.value, f.unit);
    if (f.target->on_ratio && f.ratio_high > 0) {
      // The repetitions' spread, as a whisker across the bar.
      const int mid = y + kRow / 2;
      out += "<line x1=\"" + std::to_string(x_of(f.ratio_low / f.target->limit)) + "\" y1=\"" + std::to_string(mid) +
             "\" x2=\"" + std::to_string(x_of(f.ratio_high / f.target->limit)) + "\" y2=\"" + std::to_string(mid) +
             "\" stroke=\"#222\" stroke-width=\"2\"/>\n";
      quantity += spread_text(f);
    }
    out += "<text x=\"" + std::to_string(x_of(v) + 6) + "\" y=\"" + std::to_string(y + 14) + "\">" +
           xml_text(quantity + " (target " + f.target_text() + ")" + (v > kMax ? " >>" : "")) + "</text>\n";
  }
  const int line_x = x_of(1.0), bottom = kTop + kRow * static_cast<int>(shown.size());
  out += "<line x1=\"" + std::to_string(line_x) + "\" y1=\"" + std::to_string(kTop - 4) + "\" x2=\"" +
         std::to_string(line_x) + "\" y2=\"" + std::to_string(bottom + 4) +
         "\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n";
  out += "<text x=\"" + std::to_string(line_x) + "\" y=\"" + std::to_string(bottom + 20) +
         "\" text-anchor=\"middle\">target</text>\n";
  return out + "</svg>\n";
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (f) f << text;
  if (!f) return io_error("cannot write " + path);
  return Status();
}

}  // namespace tensorpc::tools
