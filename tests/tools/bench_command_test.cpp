// `tensorpc bench`: a small run writes every figure to its JSON file with
// positive values, and the table, JSON and SVG say what the figures say.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <vector>

#include "file_util.h"
#include "core/log.h"
#include "lab/bench_command.h"
#include "lab/bench_measure.h"
#include "lab/random_model.h"
#include "tensorpc/bench.h"

namespace tensorpc::tools {
namespace {

using test::Capture;
using test::read_file;
using test::ScopedTempDir;

// Every number after `"key": ` in `json`.
std::vector<double> numbers_of(const std::string& json, const std::string& key) {
  std::vector<double> out;
  const std::regex re("\"" + key + "\": ([-0-9.eE+]+|null)");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1] == "null" ? -1 : std::stod((*it)[1]));
  }
  return out;
}

// The quick run's shape, made smaller still: one size, a tiny model (written
// into `dir`), the JSON and SVG into `dir`.
BenchOptions small_run(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "tiny_q8_0.gguf").string();
  if (!write_random_llama(model, RandomModelOptions{.type = DType::q8_0}).ok()) ADD_FAILURE() << "model " << model;
  BenchOptions o;
  o.quick = true;
  o.repetitions = 1;
  o.threads = 2;
  o.n_predict = 3;
  o.link = parse_link("1ms,1gbit").value();
  o.sizes = {uint64_t{1} << 20};
  o.handover_bytes = uint64_t{1} << 20;
  o.round_trips = 50;
  o.gpu_dim = 256;  // the GPU figures, where a Vulkan device is there: small too
  o.gpu_copy_bytes = uint64_t{4} << 20;
  o.models = {{.key = "tiny", .label = "tiny", .path = model}};
  o.load_models = o.models;
  o.json_path = (dir / "bench.json").string();
  o.plot_path = (dir / "bench.svg").string();
  return o;
}

TEST(BenchCommand, AQuickRunWritesEveryFigureWithPositiveValues) {
  log::set_level(log::Level::warn);
  const ScopedTempDir dir;
  const BenchOptions o = small_run(dir.path);
  Capture out, err;
  ASSERT_EQ(bench_command(o, out.f, err.f), 0) << err.text();
  const std::string table = out.text();
  EXPECT_NE(table.find("targets met (median of 1; quick run)\n"), std::string::npos) << table;

  const std::string json = read_file(o.json_path);
  for (const char* id : {"rpc.round_trip",
                         "rpc.set.1MiB",
                         "rpc.get.1MiB",
                         "handover.devices.time",
                         "handover.devices.client_bytes",
                         "handover.servers.time",
                         "handover.servers.client_bytes",
                         "model.tiny.decode.local",
                         "model.tiny.decode.1x1",
                         "model.tiny.decode.2x2",
                         "model.tiny.prefill.local",
                         "model.tiny.prefill.1x1",
                         "model.tiny.prefill.2x2",
                         "model.tiny.bytes_per_token.1x1",
                         "model.tiny.round_trips_per_server_token.2x2",
                         "model.tiny.decode.1x1_ceiling.sleeping",
                         "model.tiny.decode.2x2_ceiling.sleeping",
                         "model.tiny.decode.2x2_ceiling.polling",
                         "model.tiny.decode.2x2_link",
                         "model.tiny.round_trips_per_server_token.2x2_link",
                         "model.tiny.implied_round_trips_per_server_token.2x2_link",
                         "load.tiny.time",
                         "load.tiny.bytes"}) {
    EXPECT_NE(json.find("\"id\": \"" + std::string(id) + "\""), std::string::npos) << id << "\n" << json;
  }
  const std::vector<double> values = numbers_of(json, "value");
  EXPECT_GE(values.size(), 21u);
  // Every figure is measured. The link's implied round trips are the one that
  // may be 0: the time the link adds, clamped at 0, when three tokens over the
  // link happened to run no slower than on loopback (a sanitizer build).
  const size_t implied = json.find("\"id\": \"model.tiny.implied_round_trips_per_server_token.2x2_link\"");
  ASSERT_NE(implied, std::string::npos);
  const std::string implied_figure = json.substr(implied, json.find('}', implied) - implied);
  const std::vector<double> implied_value = numbers_of(implied_figure, "value");
  ASSERT_EQ(implied_value.size(), 1u) << implied_figure;
  EXPECT_GE(implied_value[0], 0) << implied_figure;
  size_t zeros = 0;
  for (double v : values) {
    EXPECT_GE(v, 0) << json;
    zeros += v == 0;
  }
  EXPECT_EQ(zeros, implied_value[0] == 0 ? 1u : 0u) << json;
  for (double v : numbers_of(json, "baseline")) EXPECT_GT(v, 0) << json;
  EXPECT_NE(json.find("\"link\": \"1ms,1gbit\""), std::string::npos);
  EXPECT_NE(json.find("\"awake_cores\": false"), std::string::npos);
  // Layouts measured in turns carry their repetitions' spread; with one
  // repetition it is that repetition's ratio.
  const size_t spread = json.find("\"id\": \"model.tiny.decode.2x2\"");
  ASSERT_NE(spread, std::string::npos);
  const std::string spread_figure = json.substr(spread, json.find('}', spread) - spread);
  const std::vector<double> ratio = numbers_of(spread_figure, "ratio"), low = numbers_of(spread_figure, "ratio_low"),
                            high = numbers_of(spread_figure, "ratio_high");
  ASSERT_EQ(low.size(), 1u) << spread_figure;
  ASSERT_EQ(high.size(), 1u) << spread_figure;
  ASSERT_GE(ratio.size(), 1u) << spread_figure;
  EXPECT_NEAR(low[0], ratio[0], 1e-4 * ratio[0]) << spread_figure;
  EXPECT_NEAR(high[0], ratio[0], 1e-4 * ratio[0]) << spread_figure;

  // A ceiling runs each repetition's local step, whole or in two halves,
  // plus its hand-overs: below the local CPU's speed, never above.
  for (const char* kind : {"1x1_ceiling.sleeping", "2x2_ceiling.sleeping", "2x2_ceiling.polling"}) {
    const std::string key = "\"id\": \"model.tiny.decode." + std::string(kind) + "\"";
    const size_t at = json.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    const std::string figure = json.substr(at, json.find('}', at) - at);
    const std::vector<double> ratio = numbers_of(figure, "ratio");
    ASSERT_GE(ratio.size(), 1u) << figure;
    EXPECT_GT(ratio[0], 0) << figure;
    EXPECT_LT(ratio[0], 1) << figure;
  }

  const std::string svg = read_file(o.plot_path);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("round trip of a tiny command"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// The raw pipeline of the ceilings: a step takes at least both ends' work,
// waiting asleep or polling, and the far end goes back to sleeping reads
// after a polled step: round trips and bulk transfers still work on the pair.
TEST(RawLoopback, APipelineStepTakesBothEndsWorkAndTheSocketStaysUsable) {
  using std::chrono::microseconds;
  auto raw = RawLoopback::start(1 << 20);
  ASSERT_TRUE(raw.ok()) << raw.status().to_string();
  for (bool polling : {true, false, true}) {
    auto step = raw.value()->pipeline_step(microseconds(300), microseconds(700), 5, polling);
    ASSERT_TRUE(step.ok()) << step.status().to_string();
    EXPECT_GE(step.value(), 1e-3) << "polling " << polling;
    EXPECT_LT(step.value(), 1.0) << "polling " << polling;
  }
  auto rt = raw.value()->round_trip(64, 10);
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  EXPECT_GT(rt.value(), 0);
  std::vector<uint8_t> bytes(1 << 20, 7);
  auto push = raw.value()->push(bytes.data(), bytes.size());
  ASSERT_TRUE(push.ok()) << push.status().to_string();
  std::fill(bytes.begin(), bytes.end(), 0);
  auto pull = raw.value()->pull(bytes.data(), bytes.size());
  ASSERT_TRUE(pull.ok()) << pull.status().to_string();
  EXPECT_EQ(bytes.front(), 7);  // the far end sends back what it was sent last
  EXPECT_EQ(bytes.back(), 7);
}

// The exit code `tensorpc bench` leaves after `args` (in order), -1 when
// the bench never ran; throws what CLI11 throws for a refused line.
int bench_exit_code(std::vector<std::string> args) {
  CLI::App app;
  int exit_code = -1;
  add_bench_command(app, &exit_code);
  args.insert(args.begin(), "bench");
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector of arguments last first
  app.parse(args);
  return exit_code;
}

// --lookup-only: the bundled model's decode with lookup against without, on
// a text that repeats its prompt, where a step yields more than one token.
TEST(BenchCommand, ALookupRunComparesDecodeWithAndWithoutLookup) {
  log::set_level(log::Level::warn);
  const ScopedTempDir dir;
  BenchOptions o = small_run(dir.path);
  o.lookup_only = true;
  o.bundled_model = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
  auto figures = run_bench(o, nullptr);
  ASSERT_TRUE(figures.ok()) << figures.status().to_string();
  ASSERT_EQ(figures.value().size(), 2u);
  const Figure& decode = figures.value()[0];
  EXPECT_EQ(decode.id, "lookup.kjv_tiny.decode.2x2_link");
  EXPECT_GT(decode.value, 0);
  EXPECT_GT(decode.baseline, 0);
  const Figure& per_step = figures.value()[1];
  EXPECT_EQ(per_step.id, "lookup.kjv_tiny.tokens_per_step.2x2_link");
  EXPECT_GT(per_step.value, 1.0) << "no draft was accepted";
  EXPECT_EQ(per_step.baseline, 1.0);
}

TEST(BenchCommand, ABadLinkIsRefusedBeforeAnythingRuns) {
  EXPECT_THROW(bench_exit_code({"--link", "1ms"}), CLI::ValidationError);
}

TEST(BenchCommand, GpuOnlyIsRefusedWithQuantOnlyAndWithADeviceListOfNoGpu) {
  EXPECT_THROW(bench_exit_code({"--gpu-only", "--quant-only"}), CLI::ExcludesError);
  EXPECT_THROW(bench_exit_code({"--device", "gpu"}), CLI::ValidationError);
  // `--device cpu` names no GPU: nothing for --gpu-only to measure, and nothing is.
  EXPECT_EQ(bench_exit_code({"--gpu-only", "--device", "cpu"}), 1);
}

TEST(BenchReport, TheTableShowsValueBaselineRatioAndWhetherTheTargetIsMet) {
  const std::vector<Figure> figures = {
      {.id = "a",
       .name = "round trip",
       .value = 30,
       .unit = "us",
       .baseline = 20,
       .baseline_name = "raw TCP",
       .target = Target{.bound = Target::Bound::at_most, .limit = 1.5}},
      {.id = "b",
       .name = "set 64 MiB",
       .value = 1,
       .unit = "GB/s",
       .baseline = 2,
       .baseline_name = "raw TCP",
       .target = Target{.bound = Target::Bound::at_least, .limit = 0.8}},
      {.id = "c",
       .name = "client bytes",
       .value = 200,
       .unit = "B",
       .target = Target{.bound = Target::Bound::at_most, .limit = 1024, .on_ratio = false}},
  };
  EXPECT_TRUE(figures[0].met());
  EXPECT_FALSE(figures[1].met());
  EXPECT_TRUE(figures[2].met());
  const std::string table = format_table(figures);
  EXPECT_NE(table.find("1.50x"), std::string::npos) << table;
  EXPECT_NE(table.find("MISSED"), std::string::npos) << table;
  EXPECT_NE(table.find("<= 1.0 KiB"), std::string::npos) << table;
  const std::string json = format_json(figures, {"\"quick\": true"});
  EXPECT_NE(json.find("\"ratio\": 1.5"), std::string::npos) << json;
  EXPECT_NE(json.find("\"met\": false"), std::string::npos) << json;
  EXPECT_EQ(json.find("ratio_low"), std::string::npos) << json;  // no figure was measured in turns
}

TEST(BenchReport, ARatioMeasuredInTurnsShowsItsLowestAndHighestRepetition) {
  // Three turns of a layout and its baseline: ratios 0.8, 1.0 and 0.9; a
  // fourth value without a baseline of its turn does not count.
  const auto [low, high] = ratio_range({80, 200, 90, 500}, {100, 200, 100});
  EXPECT_DOUBLE_EQ(low, 0.8);
  EXPECT_DOUBLE_EQ(high, 1.0);
  EXPECT_EQ(ratio_range({1, 2}, {}), (std::pair{0.0, 0.0}));
  EXPECT_EQ(ratio_range({1, 2}, {0, 0}), (std::pair{0.0, 0.0}));

  const std::vector<Figure> figures = {{.id = "decode",
                                        .name = "decode, 2 x 2",
                                        .value = 90,
                                        .unit = "tok/s",
                                        .baseline = 100,
                                        .baseline_name = "local CPU",
                                        .target = Target{.bound = Target::Bound::at_least, .limit = 0.9},
                                        .ratio_low = low,
                                        .ratio_high = high}};
  const std::string table = format_table(figures);
  EXPECT_NE(table.find("0.90x [0.80-1.00]"), std::string::npos) << table;
  const std::string json = format_json(figures, {});
  EXPECT_NE(json.find("\"ratio_low\": 0.8, \"ratio_high\": 1"), std::string::npos) << json;
}

// --awake-cores: the request is held for the run (here on a file of the
// test's own), and the table and JSON say so; a request that cannot be made
// stops the bench before it measures anything.
TEST(BenchCommand, ARunWithAwakeCoresHoldsTheRequestAndSaysSo) {
  log::set_level(log::Level::warn);
  const ScopedTempDir dir;
  const BenchOptions o = small_run(dir.path);
  const test::TempFile latency("");
  {
    Capture out, err;
    ASSERT_EQ(bench_with_awake_cores(o, latency.path, out.f, err.f), 0) << err.text();
    const std::string table = out.text();
    EXPECT_NE(table.find("quick run; idle cores kept awake)"), std::string::npos) << table;
  }
  EXPECT_NE(read_file(o.json_path).find("\"awake_cores\": true"), std::string::npos);
  EXPECT_EQ(read_file(latency.path), std::string(4, '\0'));

  std::filesystem::remove(o.json_path);
  const std::string missing = (std::filesystem::path(dir.path) / "no-such-dir" / "cpu_latency").string();
  Capture out, err;
  EXPECT_EQ(bench_with_awake_cores(o, missing, out.f, err.f), 1);
  const std::string errors = err.text();
  EXPECT_NE(errors.find("tensorpc bench: --awake-cores: cannot keep idle cores awake: " + missing), std::string::npos)
      << errors;
  EXPECT_FALSE(std::filesystem::exists(o.json_path));
}

}  // namespace
}  // namespace tensorpc::tools
