// The serving loop (serve/engine.h) on the bundled model: requests generated
// together in slots give the text each gives alone and the text the plain
// generation loop gives; the queue, cancellation, stop strings, token limits
// and the reuse of a slot's cached prompt.
#include "serve/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "model/runtime/embedding.h"
#include "model/runtime/generate.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/server.h"

namespace tensorpc::serve {
namespace {

std::string bundled() { return std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf"; }

// One request's text and end, filled from the engine's thread.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::string text;
  std::optional<Outcome> outcome;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);

  Request request(std::vector<int32_t> prompt, int64_t max_tokens) {
    Request r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampler.temperature = 0;
    r.cancel = cancel;
    r.on_text = [this](std::string_view piece) {
      std::lock_guard lock(mu);
      text += piece;
      return true;
    };
    r.on_done = [this](const Outcome& o) {
      std::lock_guard lock(mu);
      outcome = o;
      cv.notify_all();
    };
    return r;
  }
  Outcome wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return outcome.has_value(); });
    return *outcome;
  }
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(bundled())) GTEST_SKIP() << bundled() << " is absent";
    model = LlamaModel::open(bundled()).value();
  }
  // An engine of `parallel` slots of 128 positions on the local CPU; with
  // `draft`, the model drafting for itself (a second instance: a model is
  // placed once at a time) on a CPU of its own.
  std::unique_ptr<Engine> engine(int parallel, int queue = 16, int64_t n_batch = 32, bool lookup = false,
                                 bool draft = false) {
    PlacementOptions po;
    po.n_ctx = 128 * parallel;
    placement = ModelPlacement::create(*model, {&cpu}, po).value();
    EngineOptions eo{.parallel = parallel, .n_batch = n_batch, .queue = queue, .lookup = lookup};
    if (draft) {
      draft_model = LlamaModel::open(bundled()).value();
      draft_placement = ModelPlacement::create(*draft_model, {&draft_cpu}, po).value();
      eo.draft_model = draft_model.get();
      eo.draft_placement = draft_placement.get();
    }
    return Engine::create(*model, *placement, eo).value();
  }
  std::vector<int32_t> tokens(std::string_view text) const { return model->tokenizer().encode(text); }

  CpuDevice cpu{{.threads = 2}};
  CpuDevice draft_cpu{{.threads = 1}};
  std::unique_ptr<LlamaModel> model, draft_model;
  std::unique_ptr<ModelPlacement> placement, draft_placement;
};

const std::vector<std::string> kPrompts = {"In the beginning", "And God said", "The LORD is my shepherd",
                                           "Blessed are the", "And it came to pass", "For God so loved",
                                           "Now the serpent", "Let there be"};

TEST_F(EngineTest, RequestsGeneratedTogetherGiveWhatEachGivesAloneAndWhatTheGenerationLoopGives) {
  // Alone: the plain generation loop, greedy.
  std::vector<std::string> alone;
  {
    PlacementOptions po;
    po.n_ctx = 128;
    auto p = ModelPlacement::create(*model, {&cpu}, po).value();
    Generator gen(*model, *p);
    GenerateOptions g;
    g.n_predict = 24;
    g.sampler.temperature = 0;
    for (const std::string& prompt : kPrompts) alone.push_back(generate_text(gen, prompt, g).value().text);
  }
  // Together: eight requests on four slots, submitted at once.
  std::vector<std::unique_ptr<Collected>> got;  // before the engine, which may call them until it ends
  auto e = engine(4);
  for (const std::string& prompt : kPrompts) {
    got.push_back(std::make_unique<Collected>());
    ASSERT_TRUE(e->submit(got.back()->request(tokens(prompt), 24)).ok());
  }
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const Outcome o = got[i]->wait();
    EXPECT_EQ(o.finish, Finish::length) << kPrompts[i];
    EXPECT_EQ(o.completion_tokens, 24);
    EXPECT_EQ(o.prompt_tokens, static_cast<int64_t>(tokens(kPrompts[i]).size()));
    EXPECT_EQ(got[i]->text, alone[i]) << kPrompts[i];
  }
  const EngineStats s = e->stats();
  EXPECT_EQ(s.active, 0);
  EXPECT_EQ(s.requests_done, kPrompts.size());
  EXPECT_EQ(s.generated_tokens, 24 * kPrompts.size());
  // Four at a time: far fewer steps than one request after another.
  EXPECT_LT(s.steps, 24u * kPrompts.size() / 2);
}

TEST_F(EngineTest, APromptASlotStillHoldsIsNotEvaluatedAgain) {
  Collected first, second, third;
  auto e = engine(1);
  ASSERT_TRUE(e->submit(first.request(tokens("In the beginning God created"), 8)).ok());
  first.wait();
  const uint64_t evaluated = e->stats().prompt_tokens;
  ASSERT_TRUE(e->submit(second.request(tokens("In the beginning God created the heaven"), 8)).ok());
  const Outcome o = second.wait();
  // The first prompt at least (the reply's first words may match too).
  EXPECT_GE(o.cached_tokens, static_cast<int64_t>(tokens("In the beginning God created").size()));
  EXPECT_EQ(e->stats().prompt_tokens - evaluated, tokens("In the beginning God created the heaven").size() -
                                                       static_cast<size_t>(o.cached_tokens));
  // The same text as from an empty slot.
  e.reset();
  auto fresh = engine(1);
  ASSERT_TRUE(fresh->submit(third.request(tokens("In the beginning God created the heaven"), 8)).ok());
  EXPECT_EQ(third.wait().cached_tokens, 0);
  EXPECT_EQ(second.text, third.text);
}

// OpenAI's penalties and biases change a greedy reply as they say: a
// frequency penalty breaks the reply's repetitions, a bias of -100 on the
// greedy first token makes the reply start otherwise, and a bias naming a
// token outside the vocabulary is refused at submit.
TEST_F(EngineTest, PenaltiesAndBiasesChangeAGreedyReply) {
  auto e = engine(2);
  const auto reply = [&](const std::function<void(Request&)>& adjust) {
    Collected c;
    Request r = c.request(tokens("In the beginning"), 32);
    adjust(r);
    EXPECT_TRUE(e->submit(std::move(r)).ok());
    c.wait();
    return c.text;
  };
  const std::string plain = reply([](Request&) {});
  const std::string penalised = reply([](Request& r) { r.sampler.frequency_penalty = 2.0f; });
  EXPECT_NE(penalised, plain);
  // The reply's first token: the prompt's tokens and the reply's text read as one.
  const std::vector<int32_t> prompt = tokens("In the beginning");
  const std::vector<int32_t> whole = tokens("In the beginning" + plain);
  ASSERT_GT(whole.size(), prompt.size());
  ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), whole.begin()));
  const int32_t first = whole[prompt.size()];
  const std::string banned = reply([&](Request& r) { r.sampler.logit_bias = {{first, -100.0f}}; });
  const std::vector<int32_t> after = tokens("In the beginning" + banned);
  ASSERT_GT(after.size(), prompt.size());
  EXPECT_NE(after[prompt.size()], first) << banned << " | " << plain;
  EXPECT_EQ(reply([](Request&) {}), plain) << "a request after them is unchanged";

  Collected bad;
  Request r = bad.request(tokens("In the beginning"), 4);
  r.sampler.logit_bias = {{model->hparams().n_vocab, 1.0f}};
  const Status refused = e->submit(std::move(r));
  EXPECT_EQ(refused.code(), StatusCode::invalid_argument);
  EXPECT_NE(refused.message().find("logit_bias names token"), std::string::npos) << refused.to_string();
}

// Log probabilities: greedy, each token is its step's most likely one, the
// alternatives come most likely first, and they are log probabilities (≤ 0,
// their probabilities summing to at most 1); the text is the one without them.
TEST_F(EngineTest, LogprobsOfGreedyTokensAreTheMostLikely) {
  auto e = engine(2);
  Collected plain, with;
  ASSERT_TRUE(e->submit(plain.request(tokens("In the beginning"), 12)).ok());
  std::vector<TokenLogprobs> got;
  Request r = with.request(tokens("In the beginning"), 12);
  r.top_logprobs = 5;
  r.on_logprobs = [&](const TokenLogprobs& t) { got.push_back(t); };  // the engine's thread; read after wait()
  ASSERT_TRUE(e->submit(std::move(r)).ok());
  plain.wait();
  with.wait();
  EXPECT_EQ(with.text, plain.text);
  ASSERT_EQ(got.size(), 12u);
  for (const TokenLogprobs& t : got) {
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_EQ(t.top[0].token, t.chosen.token) << "greedy picks the most likely";
    EXPECT_FLOAT_EQ(t.top[0].logprob, t.chosen.logprob);
    double sum = 0;
    for (size_t i = 0; i < t.top.size(); ++i) {
      EXPECT_LE(t.top[i].logprob, 0.0f);
      if (i > 0) {
        EXPECT_LE(t.top[i].logprob, t.top[i - 1].logprob);
      }
      sum += std::exp(t.top[i].logprob);
    }
    EXPECT_LE(sum, 1.0 + 1e-5);
    EXPECT_GT(sum, 0.0);
  }
}

TEST_F(EngineTest, AFullQueueRefusesAndACancelledRequestFreesItsSlot) {
  Collected running, waiting, refused;
  auto e = engine(1, /*queue=*/1);
  // Held until cancelled: no end of text, more tokens than the context.
  Request hold = running.request(tokens("In the beginning"), 1000);
  hold.stop_at_eos = false;
  ASSERT_TRUE(e->submit(std::move(hold)).ok());
  ASSERT_TRUE(e->submit(waiting.request(tokens("And God said"), 4)).ok());
  const Status s = e->submit(refused.request(tokens("Let there be"), 4));
  ASSERT_EQ(s.code(), StatusCode::out_of_memory) << s.to_string();
  EXPECT_NE(s.message().find("--queue 1"), std::string::npos) << s.message();
  running.cancel->store(true);
  EXPECT_EQ(running.wait().finish, Finish::cancelled);
  EXPECT_EQ(waiting.wait().finish, Finish::length);
  EXPECT_EQ(e->stats().active, 0);
}

TEST_F(EngineTest, AStopStringEndsTheTextBeforeIt) {
  Collected plain, cut;
  auto e = engine(1);
  ASSERT_TRUE(e->submit(plain.request(tokens("In the beginning"), 24)).ok());
  plain.wait();
  ASSERT_GT(plain.text.size(), 12u);
  const std::string stop = plain.text.substr(6, 4);
  Request r = cut.request(tokens("In the beginning"), 24);
  r.stop = {stop};
  ASSERT_TRUE(e->submit(std::move(r)).ok());
  EXPECT_EQ(cut.wait().finish, Finish::stop);
  EXPECT_EQ(cut.text, plain.text.substr(0, plain.text.find(stop)));
}

TEST_F(EngineTest, BadRequestsAreRefusedBeforeTheyQueue) {
  Collected c;
  auto e = engine(2);
  EXPECT_EQ(e->submit(c.request({}, 4)).code(), StatusCode::invalid_argument);
  EXPECT_EQ(e->submit(c.request({1, 999999}, 4)).code(), StatusCode::invalid_argument);
  EXPECT_EQ(e->submit(c.request(std::vector<int32_t>(128, 5), 4)).code(), StatusCode::invalid_argument);
  Request r = c.request(tokens("Let"), 4);
  r.sampler.top_p = 2;
  EXPECT_EQ(e->submit(std::move(r)).code(), StatusCode::invalid_argument);
  EXPECT_EQ(e->slot_context(), 128);
}

TEST_F(EngineTest, AReplyStopsAtTheEndOfItsSlotsContext) {
  Collected c;
  auto e = engine(2);
  const std::vector<int32_t> prompt(120, tokens("And")[1]);
  ASSERT_TRUE(e->submit(c.request(prompt, 100)).ok());
  const Outcome o = c.wait();
  EXPECT_EQ(o.finish, Finish::length);
  // The last token sampled needs no position of its own.
  EXPECT_EQ(o.completion_tokens, 128 - 120 + 1);
}

TEST_F(EngineTest, OverTwoServersTheTextEqualsTheLocalText) {
  std::vector<std::unique_ptr<Collected>> a, b;  // before the engines, which may call them until they end
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::unique_ptr<Device>> remote;
  std::vector<Device*> devices;
  for (int i = 0; i < 2; ++i) {
    ServerOptions so;
    so.port = 0;
    so.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1})};
    servers.push_back(Server::start(so).value());
    remote.push_back(remote_device("127.0.0.1:" + std::to_string(servers.back()->port()), 0));
    devices.push_back(remote.back().get());
  }
  // A model is placed once at a time: the servers get a second copy.
  auto copy = LlamaModel::open(bundled()).value();
  PlacementOptions po;
  po.n_ctx = 128 * 3;
  auto p = ModelPlacement::create(*copy, devices, po).value();
  auto over = Engine::create(*copy, *p, {.parallel = 3}).value();
  auto here = engine(3);
  for (size_t i = 0; i < 5; ++i) {
    a.push_back(std::make_unique<Collected>());
    b.push_back(std::make_unique<Collected>());
    ASSERT_TRUE(over->submit(a.back()->request(tokens(kPrompts[i]), 16)).ok());
    ASSERT_TRUE(here->submit(b.back()->request(tokens(kPrompts[i]), 16)).ok());
  }
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(a[i]->wait().finish, Finish::length) << a[i]->outcome->status.to_string();
    b[i]->wait();
    EXPECT_EQ(a[i]->text, b[i]->text) << kPrompts[i];
  }
  over.reset();
  p.reset();
}

// Texts that repeat themselves, where prompt lookup finds drafts.
const std::vector<std::string> kRepeating = {
    "In the beginning God created the heaven and the earth. In the beginning God created the heaven and the earth. "
    "In the beginning God",
    "And God said, Let there be light: and there was light. And God said, Let there be light: and there was",
    "The LORD is my shepherd; I shall not want. The LORD is my shepherd; I shall not want. The LORD is",
    "Blessed are the meek: for they shall inherit the earth. Blessed are the meek: for they shall"};

enum class Speculation { none, lookup, draft };

// What requests served together gave, with or without speculation.
struct Served {
  std::vector<std::string> texts;
  std::vector<Outcome> outcomes;
  std::vector<std::vector<TokenLogprobs>> logprobs;
  EngineStats stats;
};

class EngineLookupTest : public EngineTest {
 protected:
  // Serves `requests` (each made from its Collected) at once on three slots,
  // `n_batch` tokens a step, with or without speculation.
  Served serve(Speculation speculation, const std::vector<std::function<Request(Collected&)>>& requests,
               int64_t n_batch = 32) {
    Served out;
    out.logprobs.resize(requests.size());
    std::vector<std::unique_ptr<Collected>> got;  // before the engine, which may call them until it ends
    auto e = engine(3, 16, n_batch, speculation == Speculation::lookup, speculation == Speculation::draft);
    for (size_t i = 0; i < requests.size(); ++i) {
      got.push_back(std::make_unique<Collected>());
      Request r = requests[i](*got.back());
      if (r.top_logprobs >= 0) r.on_logprobs = [&out, i](const TokenLogprobs& l) { out.logprobs[i].push_back(l); };
      EXPECT_TRUE(e->submit(std::move(r)).ok());
    }
    for (auto& c : got) {
      out.outcomes.push_back(c->wait());
      out.texts.push_back(c->text);
    }
    out.stats = e->stats();
    e.reset();
    placement.reset();  // a model's weights are placed once at a time
    draft_placement.reset();
    return out;
  }
  // The same requests with lookup, with a draft model and without: the same
  // texts, token counts and ends. Returns what lookup gave; `without` and
  // `drafted`, if given, what plain decoding and the draft model gave.
  Served expect_same(const std::vector<std::function<Request(Collected&)>>& requests, int64_t n_batch = 32,
                     Served* without = nullptr, Served* drafted = nullptr) {
    const Served plain = serve(Speculation::none, requests, n_batch);
    const Served fast = serve(Speculation::lookup, requests, n_batch);
    const Served by_draft = serve(Speculation::draft, requests, n_batch);
    if (without != nullptr) *without = plain;
    if (drafted != nullptr) *drafted = by_draft;
    for (const Served* s : {&fast, &by_draft}) {
      const char* what = s == &fast ? "lookup" : "a draft model";
      for (size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(s->texts[i], plain.texts[i]) << what << ", request " << i;
        EXPECT_EQ(s->outcomes[i].completion_tokens, plain.outcomes[i].completion_tokens) << what << ", request " << i;
        EXPECT_EQ(s->outcomes[i].finish, plain.outcomes[i].finish) << what << ", request " << i;
        EXPECT_EQ(s->outcomes[i].stop_string, plain.outcomes[i].stop_string) << what << ", request " << i;
      }
      EXPECT_EQ(s->stats.generated_tokens, plain.stats.generated_tokens) << what;
    }
    EXPECT_EQ(plain.stats.draft_tokens, 0u);
    return fast;
  }
};

// Four requests on three slots (one waits), greedy, on texts that repeat
// themselves: the texts of plain decoding, drafts accepted, fewer decode
// entries than tokens; and with a batch of 8 tokens, where drafts share the
// steps with the waiting prompt.
TEST_F(EngineLookupTest, RequestsTogetherGivePlainDecodingsTextsGreedy) {
  std::vector<std::function<Request(Collected&)>> requests;
  for (const std::string& text : kRepeating) {
    requests.push_back([&, text](Collected& c) { return c.request(tokens(text), 40); });
  }
  Served plain, drafted;
  const Served fast = expect_same(requests, 32, &plain, &drafted);
  EXPECT_LT(fast.stats.steps, plain.stats.steps);
  // The model drafting for itself, greedy: every guess right.
  EXPECT_LT(drafted.stats.steps, fast.stats.steps);
  EXPECT_GT(drafted.stats.draft_tokens, 0u);
  EXPECT_EQ(drafted.stats.draft_accepted, drafted.stats.draft_tokens);
  EXPECT_GT(fast.stats.draft_tokens, 0u);
  EXPECT_GT(fast.stats.draft_accepted, 0u);
  EXPECT_LE(fast.stats.draft_accepted, fast.stats.draft_tokens);
  EXPECT_GT(fast.stats.decoded_tokens, fast.stats.decode_steps) << "more than a token a decode step";
  EXPECT_EQ(fast.stats.decoded_tokens + kRepeating.size(), fast.stats.generated_tokens)
      << "every token but each request's first comes from a decode entry";
  expect_same(requests, /*n_batch=*/8);
}

// Temperature 1 under a seed, with a repetition and a frequency penalty:
// the sampler's draws and penalties are those of decoding one token a step.
TEST_F(EngineLookupTest, RequestsTogetherGivePlainDecodingsTextsSeeded) {
  std::vector<std::function<Request(Collected&)>> requests;
  for (size_t i = 0; i < kRepeating.size(); ++i) {
    requests.push_back([&, i](Collected& c) {
      Request r = c.request(tokens(kRepeating[i]), 40);
      r.sampler.temperature = 1.0f;
      r.sampler.seed = 7 + i;
      r.sampler.repeat_penalty = 1.1f;
      r.sampler.frequency_penalty = 0.3f;
      return r;
    });
  }
  EXPECT_GT(expect_same(requests).stats.draft_tokens, 0u);
}

// A token limit, a stop string or the end of the slot's context that falls
// inside a draft the sampler accepts ends the text where it ends without lookup.
TEST_F(EngineLookupTest, LimitsAndStopStringsInsideADraftCutWhereTheyDoWithout) {
  const std::string text = kRepeating[0];
  std::vector<std::function<Request(Collected&)>> requests;
  for (int64_t max_tokens : {5, 9, 14, 23}) {
    requests.push_back([&, max_tokens](Collected& c) { return c.request(tokens(text), max_tokens); });
  }
  const Served plain = serve(Speculation::none, {[&](Collected& c) { return c.request(tokens(text), 40); }});
  ASSERT_GT(plain.texts[0].size(), 60u);
  for (size_t at : {10, 25, 41, 57}) {
    const std::string stop = plain.texts[0].substr(at, 3);
    requests.push_back([&, stop](Collected& c) {
      Request r = c.request(tokens(text), 40);
      r.stop = {stop};
      return r;
    });
  }
  // A prompt that repeats one token 120 times: drafts up to the end of the slot's 128 positions.
  requests.push_back([&](Collected& c) { return c.request(std::vector<int32_t>(120, tokens("And")[1]), 100); });
  const Served fast = expect_same(requests);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(fast.outcomes[i].finish, Finish::length);
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(fast.outcomes[i].finish, Finish::stop);
  EXPECT_EQ(fast.outcomes[8].finish, Finish::length);
  EXPECT_EQ(fast.outcomes[8].completion_tokens, 128 - 120 + 1) << "the last token sampled needs no position";
  EXPECT_GT(fast.stats.draft_accepted, 0u);
}

// A request with log probabilities decodes a token a step beside requests
// that speculate: its text and log probabilities are those without lookup.
TEST_F(EngineLookupTest, ARequestWithLogprobsBesideSpeculatingOnesIsUnchanged) {
  std::vector<std::function<Request(Collected&)>> requests;
  for (size_t i = 0; i < 3; ++i) {
    requests.push_back([&, i](Collected& c) {
      Request r = c.request(tokens(kRepeating[i]), 24);
      if (i == 1) r.top_logprobs = 3;
      return r;
    });
  }
  const Served plain = serve(Speculation::none, requests);
  const Served fast = expect_same(requests);
  ASSERT_EQ(fast.logprobs[1].size(), 24u);
  ASSERT_EQ(plain.logprobs[1].size(), 24u);
  for (size_t j = 0; j < 24; ++j) {
    EXPECT_EQ(fast.logprobs[1][j].chosen.token, plain.logprobs[1][j].chosen.token);
    // Other slots' drafts change the step's shape, so the sums' order: the same up to rounding.
    EXPECT_NEAR(fast.logprobs[1][j].chosen.logprob, plain.logprobs[1][j].chosen.logprob, 1e-5f);
    ASSERT_EQ(fast.logprobs[1][j].top.size(), 3u);
    EXPECT_EQ(fast.logprobs[1][j].top[2].token, plain.logprobs[1][j].top[2].token);
  }
  EXPECT_GT(fast.stats.draft_tokens, 0u);
}

}  // namespace
}  // namespace tensorpc::serve

namespace tensorpc::serve {
namespace {

// An embedding request's vectors, filled from the engine's thread.
struct CollectedVectors {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<StatusOr<std::vector<std::vector<float>>>> result;

  EmbedRequest request(std::vector<std::vector<int32_t>> inputs) {
    EmbedRequest r;
    r.inputs = std::move(inputs);
    r.on_done = [this](StatusOr<std::vector<std::vector<float>>> v) {
      std::lock_guard lock(mu);
      result = std::move(v);
      cv.notify_all();
    };
    return r;
  }
  StatusOr<std::vector<std::vector<float>>> wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return result.has_value(); });
    return *result;
  }
};

TEST_F(EngineTest, EmbeddingsOnFreeSlotsLeaveTheGeneratedTextsAsTheyAre) {
  const std::vector<std::string> texts(kPrompts.begin(), kPrompts.begin() + 5);
  std::vector<std::vector<int32_t>> inputs;
  for (const std::string& t : texts) inputs.push_back(tokens(t));
  const auto generate_two = [&](Engine& e, CollectedVectors* embedding) {
    std::vector<std::unique_ptr<Collected>> got;
    for (int i = 0; i < 2; ++i) {
      got.push_back(std::make_unique<Collected>());
      EXPECT_TRUE(e.submit(got.back()->request(tokens(kPrompts[static_cast<size_t>(i) + 5]), 24)).ok());
    }
    // Five inputs, one slot free: they take turns between the generation steps.
    if (embedding != nullptr) {
      EXPECT_TRUE(e.submit_embedding(embedding->request(inputs)).ok());
    }
    std::vector<std::string> out;
    for (auto& c : got) {
      c->wait();
      out.push_back(c->text);
    }
    return out;
  };
  std::vector<std::string> plain;
  {
    auto e = engine(3);
    plain = generate_two(*e, nullptr);
  }
  placement.reset();  // a model's weights are placed once at a time
  CollectedVectors vectors;
  auto e = engine(3);
  EXPECT_EQ(generate_two(*e, &vectors), plain);
  auto v = vectors.wait();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_EQ(v.value().size(), inputs.size());

  // The vectors are embed()'s on a generator of the model's own.
  e.reset();
  placement.reset();
  placement = ModelPlacement::create(*model, {&cpu}, {.n_ctx = 128}).value();
  Generator gen(*model, *placement);
  const int64_t seq = 0;
  auto want = embed(gen, inputs, std::span<const int64_t>(&seq, 1), {.pooling = model->hparams().pooling});
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(v.value()[i].size(), want.value()[i].size());
    for (size_t j = 0; j < want.value()[i].size(); ++j) EXPECT_NEAR(v.value()[i][j], want.value()[i][j], 1e-4f);
  }
}

TEST_F(EngineTest, BadEmbeddingRequestsAreRefusedBeforeTheyQueue) {
  auto e = engine(1);
  CollectedVectors never;
  EXPECT_EQ(e->submit_embedding(never.request({})).code(), StatusCode::invalid_argument);
  EXPECT_EQ(e->submit_embedding(never.request({{1, 2}, {}})).code(), StatusCode::invalid_argument);
  EXPECT_EQ(e->submit_embedding(never.request({{1, 1 << 20}})).code(), StatusCode::invalid_argument);
  const Status too_long = e->submit_embedding(never.request({std::vector<int32_t>(129, 1)}));
  EXPECT_EQ(too_long.code(), StatusCode::invalid_argument);
  EXPECT_NE(too_long.message().find("128"), std::string::npos) << too_long.to_string();
  CollectedVectors fits;
  ASSERT_TRUE(e->submit_embedding(fits.request({std::vector<int32_t>(128, 1)})).ok());
  EXPECT_TRUE(fits.wait().ok());
}

}  // namespace
}  // namespace tensorpc::serve
