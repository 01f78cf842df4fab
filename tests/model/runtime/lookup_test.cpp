// Speculative decoding by prompt lookup and by a draft model: the lookup
// drafter finds the latest, longest match; the model drafter proposes the
// draft model's greedy continuation of the text as it changes; a draft is
// verified in one step and its rejected positions rolled back; and the text
// is the one plain decoding gives, greedy and seeded, on every architecture,
// locally and across two servers.
#include <gtest/gtest.h>

#include <filesystem>

#include "api/device_set.h"
#include "lab/random_model.h"
#include "model/runtime/chat_session.h"
#include "model/runtime/draft_model.h"
#include "model/runtime/generate.h"
#include "model/runtime/prompt_lookup.h"
#include "model/runtime/speculative_step.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/server.h"

namespace tensorpc::tools {
namespace {

TEST(LookupDraft, ProposesWhatFollowedTheLatestOccurrenceOfTheLastTokens) {
  // The last token 7 came twice before: the later one, followed by 8 9 1 7, wins.
  const std::vector<int32_t> text{7, 1, 2, 7, 8, 9, 1, 7};
  EXPECT_EQ(lookup_draft(text, 8), (std::vector<int32_t>{8, 9, 1, 7}));
  EXPECT_EQ(lookup_draft(text, 2), (std::vector<int32_t>{8, 9}));
}

TEST(LookupDraft, PrefersTheLongestMatchingSuffix) {
  // "3 4" occurred at the start (followed by 5); 4 alone later (followed by 6).
  const std::vector<int32_t> text{3, 4, 5, 0, 4, 6, 0, 3, 4};
  EXPECT_EQ(lookup_draft(text, 2), (std::vector<int32_t>{5, 0}));
  EXPECT_EQ(lookup_draft(text, 2, /*max_ngram=*/1), (std::vector<int32_t>{6, 0}));
}

TEST(LookupDraft, ProposesNothingWithoutAMatch) {
  EXPECT_TRUE(lookup_draft(std::vector<int32_t>{1, 2, 3, 4}, 8).empty());
  EXPECT_TRUE(lookup_draft(std::vector<int32_t>{5}, 8).empty());
  EXPECT_TRUE(lookup_draft(std::vector<int32_t>{}, 8).empty());
  EXPECT_TRUE(lookup_draft(std::vector<int32_t>{5, 5}, 0).empty());
}

TEST(PromptLookup, DraftLengthGrowsOnFullAcceptanceAndShrinksOnRejection) {
  PromptLookup lookup(8);
  lookup.record(8, 2);
  EXPECT_EQ(lookup.length(), 3u);
  lookup.record(3, 3);
  EXPECT_EQ(lookup.length(), 6u);
  lookup.record(6, 6);
  EXPECT_EQ(lookup.length(), 8u);  // bounded by draft_max
  lookup.record(8, 0);
  EXPECT_EQ(lookup.length(), 1u);
  EXPECT_EQ(lookup.counts().steps, 4);
  EXPECT_EQ(lookup.counts().drafted, 25);
  EXPECT_EQ(lookup.counts().accepted, 11);
}

// A random model of `arch` (the architectures generation_test.cpp covers).
// `seed` and `n_layer` make another model of the same vocabulary (a draft model).
std::unique_ptr<LlamaModel> random_model(const std::string& arch, DType type = DType::f32, uint64_t seed = 1,
                                         int64_t n_layer = 4) {
  RandomModelOptions o;
  o.arch = arch;
  o.type = type;
  o.seed = seed;
  o.n_layer = n_layer;
  if (block_size(type) > o.n_embd) {  // the super-block formats need rows of 256
    o.n_embd = 256;
    o.n_ff = 512;
  }
  if (arch == "gemma2" || arch == "phi3") o.sliding_window = 8;
  if (arch == "gemma2") {
    o.attn_softcap = 2.0f;
    o.final_softcap = 3.0f;
  }
  if (arch == "qwen3") o.n_head_dim = 24;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tensorpc_lookup_test_" + std::to_string(::getpid()) + "_" + arch + "_" +
                             std::string(name_of(type)) + "_" + std::to_string(seed) + ".gguf"))
                               .string();
  EXPECT_TRUE(write_random_llama(path, o).ok());
  auto model = LlamaModel::open(path);
  std::filesystem::remove(path);  // the mapping stays
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model.ok() ? std::move(model).value() : nullptr;
}

// A text that repeats itself: lookup finds drafts in it from the first step.
const char* const kRepetitivePrompt =
    "the word was with god and the word was god. the word was with god and the word was god. the word was";

GenerateOptions greedy(int n) {
  GenerateOptions g;
  g.n_predict = n;
  g.stop_at_eos = false;  // random models may pick EOS; the comparison wants every step
  g.sampler.temperature = 0;
  g.generator.kv_granularity = 16;  // decoding crosses KV windows
  return g;
}

// Temperature 1 under a seed, with a repetition and a presence penalty:
// every draw and every penalised token must be plain decoding's.
GenerateOptions seeded(int n) {
  GenerateOptions g = greedy(n);
  g.sampler.temperature = 1.0f;
  g.sampler.seed = 11;
  g.sampler.repeat_penalty = 1.1f;
  g.sampler.presence_penalty = 0.5f;
  return g;
}

GenerateOptions with_lookup(GenerateOptions g, int draft_max = 8) {
  g.lookup = true;
  g.draft_max = draft_max;
  return g;
}

// A draft model's generator on a CPU of its own, as --draft-model makes one.
// A model has one placement at a time (placement.h): a model drafting for
// itself is a second instance of it.
struct DraftOn {
  DraftOn(const LlamaModel& draft, int64_t n_ctx = 256) {
    auto p = ModelPlacement::create(draft, {&cpu}, {.n_ctx = n_ctx});
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (!p.ok()) return;
    placement = std::move(p).value();
    gen = std::make_unique<Generator>(draft, *placement);
  }
  GenerateOptions with_draft(GenerateOptions g, int draft_max = 8) const {
    g.draft_model = gen.get();
    g.draft_max = draft_max;
    return g;
  }
  CpuDevice cpu{{.threads = 1}};
  std::unique_ptr<ModelPlacement> placement;
  std::unique_ptr<Generator> gen;
};

GenerateResult generate_on(const LlamaModel& model, const std::vector<Device*>& devices, const GenerateOptions& g) {
  auto placement =
      ModelPlacement::create(model, devices, {.ratios = std::vector<double>(devices.size(), 1.0), .n_ctx = 256});
  EXPECT_TRUE(placement.ok()) << placement.status().to_string();
  if (!placement.ok()) return {};
  auto r = generate_text(model, *placement.value(), kRepetitivePrompt, g);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : GenerateResult{};
}

class LookupGeneration : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model = random_model(GetParam());
    ASSERT_NE(model, nullptr);
  }
  std::unique_ptr<LlamaModel> model;
};

TEST_P(LookupGeneration, GivesPlainDecodingsTokensGreedyAndSeeded) {
  CpuDevice cpu({.threads = 2});
  for (const GenerateOptions& g : {greedy(48), seeded(48)}) {
    const GenerateResult plain = generate_on(*model, {&cpu}, g);
    ASSERT_EQ(plain.generated.size(), 48u);
    for (int draft_max : {1, 3, 8}) {
      const GenerateResult fast = generate_on(*model, {&cpu}, with_lookup(g, draft_max));
      EXPECT_EQ(fast.generated, plain.generated)
          << "temperature " << g.sampler.temperature << ", draft_max " << draft_max;
      EXPECT_EQ(fast.text, plain.text);
      EXPECT_GT(fast.speculation.steps, 0) << "no draft was found in a text that repeats itself";
      if (g.sampler.temperature == 0) {
        EXPECT_GT(fast.speculation.accepted, 0) << "draft_max " << draft_max;
      }
      EXPECT_EQ(fast.decode_steps + fast.speculation.accepted, 47) << "each step yields one token and its accepted";
    }
  }
}

// Two draft models: the model itself (every greedy guess right) and another
// of the same vocabulary (most guesses wrong): either way plain decoding's text.
TEST_P(LookupGeneration, ADraftModelGivesPlainDecodingsTokensGreedyAndSeeded) {
  const std::unique_ptr<LlamaModel> itself = random_model(GetParam());
  const std::unique_ptr<LlamaModel> other = random_model(GetParam(), DType::f32, /*seed=*/7, /*n_layer=*/2);
  ASSERT_NE(itself, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(check_draft_vocabulary(model->tokenizer(), other->tokenizer()).ok());
  CpuDevice cpu({.threads = 2});
  for (const LlamaModel* draft : {itself.get(), other.get()}) {
    DraftOn on(*draft);
    ASSERT_NE(on.gen, nullptr);
    for (const GenerateOptions& g : {greedy(48), seeded(48)}) {
      const GenerateResult plain = generate_on(*model, {&cpu}, g);
      ASSERT_EQ(plain.generated.size(), 48u);
      for (int draft_max : {1, 4, 8}) {
        const GenerateResult fast = generate_on(*model, {&cpu}, on.with_draft(g, draft_max));
        const std::string what = std::string(draft == itself.get() ? "itself" : "another model") + " drafting, " +
                                 "temperature " + std::to_string(g.sampler.temperature) + ", draft_max " +
                                 std::to_string(draft_max);
        EXPECT_EQ(fast.generated, plain.generated) << what;
        EXPECT_GT(fast.speculation.steps, 0) << what;
        EXPECT_EQ(fast.decode_steps + fast.speculation.accepted, 47) << what;
        if (draft == itself.get() && g.sampler.temperature == 0) {
          EXPECT_EQ(fast.speculation.accepted, fast.speculation.drafted) << what << ": its own guesses are right";
        }
      }
    }
  }
}

TEST_P(LookupGeneration, AcrossTwoServersGivesTheLocalTokens) {
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::string> endpoints;
  for (int i = 0; i < 2; ++i) {
    ServerOptions o;
    o.port = 0;
    o.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1})};
    servers.push_back(Server::start(o).value());
    endpoints.push_back("127.0.0.1:" + std::to_string(servers.back()->port()));
  }
  auto devices = DeviceSet::connect({}, 0, endpoints);
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  CpuDevice cpu({.threads = 2});
  for (const GenerateOptions& g : {greedy(48), seeded(48)}) {
    const GenerateResult local = generate_on(*model, {&cpu}, g);
    const GenerateResult remote = generate_on(*model, devices.value().devices(), with_lookup(g));
    ASSERT_EQ(local.generated.size(), 48u);
    EXPECT_EQ(remote.generated, local.generated) << "temperature " << g.sampler.temperature;
    EXPECT_GT(remote.speculation.steps, 0) << "temperature " << g.sampler.temperature;
    EXPECT_GT(remote.decode.round_trips, 0u);
    // A draft model on the local CPU (the model itself, another instance), the model on the servers.
    const std::unique_ptr<LlamaModel> itself = random_model(GetParam());
    ASSERT_NE(itself, nullptr);
    const DraftOn on(*itself);
    const GenerateResult drafted = generate_on(*model, devices.value().devices(), on.with_draft(g));
    EXPECT_EQ(drafted.generated, local.generated) << "a draft model, temperature " << g.sampler.temperature;
    EXPECT_GT(drafted.speculation.accepted, 0) << "temperature " << g.sampler.temperature;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, LookupGeneration,
                         ::testing::Values("llama", "qwen2", "qwen3", "phi3", "gemma2"),
                         [](const auto& info) { return std::string(info.param); });

// The matrices' formats: a step of several tokens computes each token's
// logits as a step of one does, whatever kernel the format takes.
class LookupFormats : public ::testing::TestWithParam<DType> {};

TEST_P(LookupFormats, GiveGreedyPlainDecodingsTokens) {
  const std::unique_ptr<LlamaModel> model = random_model("llama", GetParam());
  ASSERT_NE(model, nullptr);
  CpuDevice cpu({.threads = 2});
  const GenerateResult plain = generate_on(*model, {&cpu}, greedy(32));
  const GenerateResult fast = generate_on(*model, {&cpu}, with_lookup(greedy(32)));
  ASSERT_EQ(plain.generated.size(), 32u);
  EXPECT_EQ(fast.generated, plain.generated);
  EXPECT_GT(fast.speculation.steps, 0);
}

INSTANTIATE_TEST_SUITE_P(Types, LookupFormats,
                         ::testing::Values(DType::q8_0, DType::bf16, DType::q5_1, DType::iq4_nl, DType::q4_K,
                                           DType::q6_K),
                         [](const auto& info) { return std::string(name_of(info.param)); });

// The plain continuation of a prompt, then drafts checked against it on a
// fresh generator: a right draft is accepted whole in one step; a wrong one
// is cut at its first wrong token, its positions rolled back, and decoding
// goes on as if it had never been drafted.
class VerifyDraft : public ::testing::Test {
 protected:
  void SetUp() override {
    model = random_model("llama");
    ASSERT_NE(model, nullptr);
    auto p = ModelPlacement::create(*model, {&cpu}, {.n_ctx = 256});
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    placement = std::move(p).value();
    const GenerateOptions g = greedy(12);
    auto r = generate_text(*model, *placement, kRepetitivePrompt, g);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    prompt = r.value().prompt;
    plain = r.value().generated;
    // A generator after the prompt, and the sampler plain decoding had then.
    gen = std::make_unique<Generator>(*model, *placement);
    sampler = std::make_unique<Sampler>(Sampler::create(g.sampler).value());
    for (int32_t t : prompt) sampler->accept(t);
    ASSERT_TRUE(gen->eval(prompt).ok());
    sampler->accept(plain[0], true);
  }
  // The plain tokens [from, to).
  std::vector<int32_t> plain_tokens(size_t from, size_t to) const {
    return std::vector<int32_t>(plain.begin() + static_cast<std::ptrdiff_t>(from),
                                plain.begin() + static_cast<std::ptrdiff_t>(to));
  }
  // Accepts every token, as generate_text() does, and keeps it in `taken`.
  const TakeToken take_all = [this](int32_t t) {
    sampler->accept(t, true);
    taken.push_back(t);
    return true;
  };
  CpuDevice cpu{{.threads = 2}};
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<ModelPlacement> placement;
  std::unique_ptr<Generator> gen;
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> prompt, plain, taken;
};

TEST_F(VerifyDraft, ARightDraftIsAcceptedWholeInOneStep) {
  auto picked = verify_draft(*gen, *sampler, plain[0], plain_tokens(1, 6), take_all);
  ASSERT_TRUE(picked.ok()) << picked.status().to_string();
  EXPECT_EQ(picked.value(), 5u);
  EXPECT_EQ(taken, plain_tokens(1, 7)) << "the draft and one token more";
  EXPECT_EQ(gen->position(), static_cast<int64_t>(prompt.size() + 6));
}

TEST_F(VerifyDraft, AWrongDraftIsCutAtItsFirstWrongTokenAndRolledBack) {
  const int32_t wrong = (plain[2] + 1) % static_cast<int32_t>(model->hparams().n_vocab);
  auto picked = verify_draft(*gen, *sampler, plain[0], std::vector<int32_t>{plain[1], wrong, plain[3]}, take_all);
  ASSERT_TRUE(picked.ok()) << picked.status().to_string();
  EXPECT_EQ(picked.value(), 1u);
  EXPECT_EQ(taken, plain_tokens(1, 3)) << "the sampler's token, not the draft's";
  EXPECT_EQ(gen->position(), static_cast<int64_t>(prompt.size() + 2)) << "the wrong token's positions rolled back";
  // One token at a time from there: the rest of plain decoding's text.
  while (taken.size() + 1 < plain.size()) {
    ASSERT_TRUE(decode_after(*gen, *sampler, nullptr, taken.back(), 1, take_all).ok());
  }
  EXPECT_EQ(taken, plain_tokens(1, plain.size()));
}

TEST_F(VerifyDraft, StopsWhereTheCallerStops) {
  auto picked = verify_draft(*gen, *sampler, plain[0], plain_tokens(1, 6), [&](int32_t t) {
    take_all(t);
    return taken.size() < 2;
  });
  ASSERT_TRUE(picked.ok()) << picked.status().to_string();
  EXPECT_EQ(taken, plain_tokens(1, 3));
  EXPECT_EQ(gen->position(), static_cast<int64_t>(prompt.size() + 2));
}

TEST(DraftVocabulary, AnotherVocabularyIsRefusedNamingTheDifference) {
  const std::unique_ptr<LlamaModel> model = random_model("llama");
  ASSERT_NE(model, nullptr);
  RandomModelOptions o;
  o.n_vocab = 330;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tensorpc_lookup_test_" + std::to_string(::getpid()) + "_vocab330.gguf"))
                               .string();
  ASSERT_TRUE(write_random_llama(path, o).ok());
  auto wider = LlamaModel::open(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(wider.ok()) << wider.status().to_string();
  const Status s = check_draft_vocabulary(model->tokenizer(), wider.value()->tokenizer());
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message(), "the draft model's vocabulary has 330 tokens, the model's 320");
  EXPECT_TRUE(check_draft_vocabulary(model->tokenizer(), model->tokenizer()).ok());
}

// The draft model's greedy continuation of `text`, one plain step a token on
// a fresh generator; `model` must have no other placement meanwhile.
std::vector<int32_t> greedy_continuation(const LlamaModel& model, std::vector<int32_t> text, size_t n) {
  CpuDevice cpu({.threads = 1});
  auto placement = ModelPlacement::create(model, {&cpu}, {.n_ctx = 256});
  EXPECT_TRUE(placement.ok());
  Generator gen(model, *placement.value());
  std::vector<int32_t> out;
  std::span<const int32_t> feed = text;
  while (out.size() < n) {
    auto logits = gen.eval(feed);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) break;
    out.push_back(
        static_cast<int32_t>(std::max_element(logits.value().begin(), logits.value().end()) - logits.value().begin()));
    feed = std::span<const int32_t>(&out.back(), 1);
  }
  return out;
}

// The drafter keeps its sequence of the draft model in step with a text
// that grows by accepted guesses, wrong ones replaced, and starts over.
TEST(ModelDrafter, DraftsTheGreedyContinuationOfTheTextAsItChanges) {
  const std::unique_ptr<LlamaModel> draft = random_model("llama", DType::f32, /*seed=*/5, /*n_layer=*/2);
  const std::unique_ptr<LlamaModel> same = random_model("llama", DType::f32, /*seed=*/5, /*n_layer=*/2);
  ASSERT_NE(draft, nullptr);
  ASSERT_NE(same, nullptr);
  DraftOn on(*draft);
  ModelDrafter drafter(*on.gen, 0, 4);
  std::vector<int32_t> text = draft->tokenizer().encode(kRepetitivePrompt);
  drafter.push(text);
  for (int round = 0; round < 4; ++round) {
    auto d = drafter.draft(8);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    ASSERT_EQ(d.value().size(), 4u) << "round " << round;
    EXPECT_EQ(d.value(), greedy_continuation(*same, text, 4)) << "round " << round;
    // Accept `round` of the guesses, then a token the draft did not guess.
    const int32_t other = (d.value()[static_cast<size_t>(std::min(round, 3))] + 1) % 320;
    for (int i = 0; i < round; ++i) text.push_back(d.value()[static_cast<size_t>(i)]);
    text.push_back(other);
    drafter.push(std::span<const int32_t>(text).last(static_cast<size_t>(round) + 1));
  }
  drafter.clear();
  text = draft->tokenizer().encode("an unrelated text");
  drafter.push(text);
  auto d = drafter.draft(3);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value(), greedy_continuation(*same, text, 3));
}

// A conversation with the bundled chat model: the replies with lookup or a
// draft model are the replies without, greedy and seeded, turn after turn.
TEST(LookupChat, RepliesEqualPlainDecodingsTurnAfterTurn) {
  const std::string path = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (tools/train/make_bpe_model.sh makes it)";
  auto model = LlamaModel::open(path);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  CpuDevice cpu({.threads = 2});
  auto placement = ModelPlacement::create(*model.value(), {&cpu}, {.n_ctx = 256});
  ASSERT_TRUE(placement.ok()) << placement.status().to_string();
  auto itself = LlamaModel::open(path);  // drafting for the model: every greedy guess is right
  ASSERT_TRUE(itself.ok()) << itself.status().to_string();
  DraftOn draft(*itself.value());
  enum class Speculation { none, lookup, draft };
  const auto converse = [&](float temperature, Speculation speculation) {
    Generator gen(*model.value(), *placement.value());
    ChatSessionOptions o;
    o.sampler.temperature = temperature;
    o.sampler.seed = 3;
    o.n_predict = 24;
    o.lookup = speculation == Speculation::lookup;
    if (speculation == Speculation::draft) o.draft_model = draft.gen.get();
    auto session = ChatSession::create(gen, ChatTemplate::named("chatml").value(), o);
    EXPECT_TRUE(session.ok()) << session.status().to_string();
    std::vector<std::string> replies;
    for (const char* message : {"Repeat: In the beginning God created the heaven and the earth.",
                                "Again: In the beginning God created the heaven and the earth."}) {
      auto turn = session.value().reply(message);
      EXPECT_TRUE(turn.ok()) << turn.status().to_string();
      if (!turn.ok()) break;
      replies.push_back(turn.value().text);
    }
    return replies;
  };
  for (float temperature : {0.0f, 1.0f}) {
    const auto plain = converse(temperature, Speculation::none);
    ASSERT_EQ(plain.size(), 2u);
    EXPECT_EQ(converse(temperature, Speculation::lookup), plain) << "temperature " << temperature;
    EXPECT_EQ(converse(temperature, Speculation::draft), plain) << "a draft model, temperature " << temperature;
  }
}

}  // namespace
}  // namespace tensorpc::tools
