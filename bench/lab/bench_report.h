// The figures of `tensorpc bench` and the three ways they are shown: a
// table for a person, JSON for a program, and an SVG bar chart of each
// figure against its target.
//
// A figure is one measured value next to the baseline measured in the same
// run (raw TCP, the local CPU, the relayed path, the cold load), their ratio,
// and the project's target when it has one. A target bounds either the ratio
// (round trip ≤ 1.5× raw TCP) or the value itself (≤ 1 KiB through the
// client).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc::tools {

struct Target {
  enum class Bound { at_most, at_least };
  Bound bound = Bound::at_most;
  double limit = 0;
  bool on_ratio = true;  // false: the bound is on the value, in its unit
};

struct Figure {
  std::string id{};    // stable key for programs: "rpc.round_trip", "decode.q8_0.2x2"
  std::string name{};  // what a person reads: "round trip of PING"
  double value = 0;
  std::string unit{};   // "us", "GB/s", "tok/s", "B", "ms", "RT/token"
  double baseline = 0;  // 0: the figure has no baseline
  std::string baseline_name{};
  std::optional<Target> target{};
  // Where value and baseline were measured in turns, repetition by
  // repetition: the lowest and highest ratio of one repetition's pair, so a
  // reader sees how far the machine's noise moves the median. Both 0: not
  // measured so.
  double ratio_low = 0, ratio_high = 0;

  // value / baseline, 0 without a baseline.
  double ratio() const { return baseline > 0 ? value / baseline : 0; }
  // The bounded quantity (ratio or value) divided by the target's limit:
  // ≤ 1 meets an at_most target, ≥ 1 an at_least one.
  double against_target() const;
  bool met() const;
  std::string target_text() const;  // "≤ 1.50×", "≤ 1 KiB", "" without a target
};

// The lowest and highest values[i] / baselines[i] over the pairs both have
// (a pair with a baseline of 0 left out); {0, 0} without a pair.
std::pair<double, double> ratio_range(const std::vector<double>& values, const std::vector<double>& baselines);

// "12.3 us", "2.81 GB/s", "1.5 KiB": the value in its unit, for tables.
std::string format_value(double value, const std::string& unit);

// The table: figure, value, baseline, ratio, target, met.
std::string format_table(const std::vector<Figure>& figures);

// {"figures": [{"id", "name", "value", "unit", "baseline", "baseline_name",
// "ratio", "ratio_low", "ratio_high", "target", "met"}, ...] (each where the
// figure has it), plus the run's settings as given in
// `settings` (already-formatted JSON members, such as "\"quick\": true").
std::string format_json(const std::vector<Figure>& figures, const std::vector<std::string>& settings);

// A horizontal bar per figure with a target: the bounded quantity over the
// limit, with the target at 1 drawn as a line; green when met, red when not.
std::string format_svg(const std::vector<Figure>& figures, const std::string& title);

// Writes `text` to `path`; an io_error naming the path on failure.
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace tensorpc::tools
