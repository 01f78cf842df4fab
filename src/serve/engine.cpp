// The serving loop (engine.h).
#include "serve/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <span>

#include "model/runtime/draft_model.h"
#include "model/runtime/embedding.h"
#include "model/runtime/prompt_lookup.h"
#include "model/runtime/speculative_step.h"
#include "serve/stop_strings.h"

namespace tensorpc::serve {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

Outcome cancelled() {
  Outcome o;
  o.finish = Finish::cancelled;
  return o;
}

// invalid_argument naming the first token outside a vocabulary of n_vocab.
Status check_vocabulary(std::span<const int32_t> tokens, int64_t n_vocab) {
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab) {
      return invalid_argument("token " + std::to_string(t) + " is not in the vocabulary of " + std::to_string(n_vocab));
    }
  }
  return Status();
}

// Generated tokens/s is averaged over this many seconds.
constexpr double kRateWindow = 5.0;

// The log-softmax of `logits` at `token`, and the `top` most likely tokens'
// (ties: the lower id first). Non-finite logits count as -inf.
TokenLogprobs logprobs_of(std::span<const float> logits, int32_t token, int top) {
  float max = -std::numeric_limits<float>::infinity();
  for (float l : logits) {
    if (std::isfinite(l)) max = std::max(max, l);
  }
  double sum = 0.0;
  for (float l : logits) {
    if (std::isfinite(l)) sum += std::exp(static_cast<double>(l) - max);
  }
  const double log_sum = static_cast<double>(max) + std::log(sum);
  const auto logprob = [&](int32_t id) {
    const float l = logits[static_cast<size_t>(id)];
    return std::isfinite(l) ? static_cast<float>(l - log_sum) : -std::numeric_limits<float>::infinity();
  };
  TokenLogprobs out;
  out.chosen = {token, logprob(token)};
  const size_t n = std::min(static_cast<size_t>(std::max(top, 0)), logits.size());
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const auto more_likely = [&](int32_t a, int32_t b) {
    const auto at = [&](int32_t id) {
      const float l = logits[static_cast<size_t>(id)];
      return std::isfinite(l) ? l : -std::numeric_limits<float>::infinity();
    };
    const float la = at(a), lb = at(b);
    return la != lb ? la > lb : a < b;
  };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), more_likely);
  for (size_t i = 0; i < n; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  return out;
}

}  // namespace

struct Engine::Pending {
  Request req;
  Clock::time_point submitted;
};

struct Engine::PendingEmbed {
  EmbedRequest req;
  std::vector<std::vector<float>> vectors;  // of the inputs done so far
};

// One sequence of the generator, and the request it serves (none when free).
struct Engine::Slot {
  int64_t seq = 0;
  std::vector<int32_t> cached;  // the tokens the slot's cells hold, from position 0
  std::unique_ptr<Pending> active;
  std::optional<Sampler> sampler;
  std::optional<DetokenizeStream> text;
  std::optional<StopMatcher> stops;
  size_t fed = 0;      // prompt tokens in the cache
  int32_t next = -1;   // the token to feed next; -1 while the prompt is being fed
  std::unique_ptr<Drafter> drafter;    // with lookup or a draft model: drafts after the prompt and the reply
  std::vector<int32_t> step_tokens;    // the step's tokens of a decoding slot: `next`, then its draft
  uint64_t order = 0;  // admission order: prompts are fed first come, first served
  Outcome outcome;
};

StatusOr<std::unique_ptr<Engine>> Engine::create(const LlamaModel& model, ModelPlacement& placement,
                                                 EngineOptions options) {
  if (options.parallel < 1 || options.n_batch < 1 || options.queue < 0) {
    return invalid_argument("serve: --parallel and --batch must be at least 1, --queue at least 0");
  }
  if (const Status s = check_speculation(options.lookup, options.draft_model != nullptr, options.draft_max); !s.ok()) {
    return s.with_context("serve");
  }
  if ((options.draft_model == nullptr) != (options.draft_placement == nullptr)) {
    return invalid_argument("serve: a draft model needs its placement");
  }
  if (options.draft_model != nullptr) {
    TENSORPC_RETURN_IF_ERROR(check_draft_vocabulary(model.tokenizer(), options.draft_model->tokenizer()));
  }
  if (placement.n_ctx() / options.parallel < 2) {
    return invalid_argument("serve: a context of " + std::to_string(placement.n_ctx()) + " cannot be shared by " +
                            std::to_string(options.parallel) + " slots");
  }
  return std::unique_ptr<Engine>(new Engine(model, placement, options));
}

Engine::Engine(const LlamaModel& model, ModelPlacement& placement, EngineOptions options)
    : model_(model), options_(options) {
  GeneratorOptions go;
  go.n_seq = options.parallel;
  go.n_batch = options.n_batch;
  go.kv_granularity = options.kv_granularity;
  go.recovery = options.recovery;
  go.scheduler = options.scheduler;
  gen_ = std::make_unique<Generator>(model, placement, go);
  slot_context_ = gen_->seq_ctx();
  if (options.draft_model != nullptr) {
    GeneratorOptions dgo;
    dgo.n_seq = options.parallel;
    dgo.n_batch = options.n_batch;
    dgo.kv_granularity = options.kv_granularity;
    draft_gen_ = std::make_unique<Generator>(*options.draft_model, *options.draft_placement, dgo);
  }
  for (int i = 0; i < options.parallel; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    Slot& slot = *slots_.back();
    slot.seq = i;
    if (draft_gen_) {
      slot.drafter = std::make_unique<ModelDrafter>(*draft_gen_, i, options.draft_max);
    } else if (options.lookup) {
      slot.drafter = std::make_unique<PromptLookup>(options.draft_max);
    }
  }
  stats_.slots = options.parallel;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Status Engine::submit(Request request) {
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (request.prompt.empty()) return invalid_argument("the prompt has no tokens");
  TENSORPC_RETURN_IF_ERROR(check_vocabulary(request.prompt, n_vocab));
  if (static_cast<int64_t>(request.prompt.size()) >= slot_context()) {
    return invalid_argument("the prompt has " + std::to_string(request.prompt.size()) +
                            " tokens; the context holds " + std::to_string(slot_context()) +
                            " (prompt and reply together)");
  }
  TENSORPC_RETURN_IF_ERROR(request.sampler.validate());
  for (const auto& [id, bias] : request.sampler.logit_bias) {
    if (id >= n_vocab) {
      return invalid_argument("logit_bias names token " + std::to_string(id) + ", not in the vocabulary of " +
                              std::to_string(n_vocab));
    }
  }
  if (!request.cancel) request.cancel = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard lock(mu_);
    TENSORPC_RETURN_IF_ERROR(check_room());
    queue_.push_back(std::make_unique<Pending>(Pending{std::move(request), Clock::now()}));
    note_queued();
  }
  wake_.notify_all();
  return Status();
}

void Engine::note_queued() { stats_.queued = static_cast<int>(queue_.size() + embed_queue_.size()); }

Status Engine::check_room() const {
  if (stopping_) return out_of_memory("the server is shutting down");
  const int busy = stats_.active + static_cast<int>(queue_.size() + embed_queue_.size());
  if (busy >= options_.parallel + options_.queue) {
    // Requests admitted to a slot leave the queue only at the next step, so
    // the queue's own length may pass --queue for a moment: say the limits.
    return out_of_memory("every slot is busy and the queue is full (--parallel " + std::to_string(options_.parallel) +
                         ", --queue " + std::to_string(options_.queue) + "); try again later");
  }
  return Status();
}

Status Engine::submit_embedding(EmbedRequest request) {
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (request.inputs.empty()) return invalid_argument("no inputs to embed");
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const std::vector<int32_t>& in = request.inputs[i];
    if (in.empty()) return invalid_argument("input " + std::to_string(i) + " has no tokens");
    if (static_cast<int64_t>(in.size()) > slot_context()) {
      return invalid_argument("input " + std::to_string(i) + " has " + std::to_string(in.size()) +
                              " tokens; the context holds " + std::to_string(slot_context()));
    }
    TENSORPC_RETURN_IF_ERROR(check_vocabulary(in, n_vocab));
  }
  if (!request.cancel) request.cancel = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard lock(mu_);
    TENSORPC_RETURN_IF_ERROR(check_room());
    embed_queue_.push_back(std::make_unique<PendingEmbed>(PendingEmbed{std::move(request), {}}));
    note_queued();
  }
  wake_.notify_all();
  return Status();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mu_);
  EngineStats s = stats_;
  const double now = seconds_between(Clock::time_point(), Clock::now());
  int64_t recent = 0;
  for (const auto& [t, n] : recent_) {
    if (now - t <= kRateWindow) recent += n;
  }
  s.tokens_per_second = static_cast<double>(recent) / kRateWindow;
  return s;
}

void Engine::note_generated(int64_t n) {
  const double now = seconds_between(Clock::time_point(), Clock::now());
  std::lock_guard lock(mu_);
  stats_.generated_tokens += static_cast<uint64_t>(n);
  recent_.emplace_back(now, n);
  while (!recent_.empty() && now - recent_.front().first > kRateWindow) recent_.pop_front();
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] {
        return stopping_ || !queue_.empty() || !embed_queue_.empty() || embedding_ || stats_.active > 0;
      });
      if (stopping_) break;
    }
    // Embeddings first: their turn ends within the call, so the slots it took are free again for admit().
    embed();
    admit();
    step();
  }
  if (embedding_) finish_embedding(unavailable("the server is shutting down"));
  std::deque<std::unique_ptr<PendingEmbed>> embeds;
  {
    std::lock_guard lock(mu_);
    embeds.swap(embed_queue_);
  }
  for (auto& e : embeds) {
    if (e->req.on_done) e->req.on_done(unavailable("the server is shutting down"));
  }
  // Shutting down: every request ends, none is left without its on_done.
  for (auto& slot : slots_) {
    if (slot->active) finish(*slot, Finish::cancelled);
  }
  std::deque<std::unique_ptr<Pending>> left;
  {
    std::lock_guard lock(mu_);
    left.swap(queue_);
  }
  for (auto& p : left) {
    if (p->req.on_done) p->req.on_done(cancelled());
  }
}

void Engine::admit() {
  // Requests whose client went away while they waited leave the queue, slot or no slot.
  std::vector<std::unique_ptr<Pending>> gone;
  {
    std::lock_guard lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->req.cancel->load()) {
        gone.push_back(std::move(*it));
        it = queue_.erase(it);
        ++stats_.requests_done;
      } else {
        ++it;
      }
    }
    note_queued();
  }
  for (auto& p : gone) {
    if (p->req.on_done) p->req.on_done(cancelled());
  }
  for (;;) {
    std::unique_ptr<Pending> p;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty()) return;
      if (std::none_of(slots_.begin(), slots_.end(), [](const auto& s) { return !s->active; })) return;
      p = std::move(queue_.front());
      queue_.pop_front();
      note_queued();
      ++stats_.active;  // in the same breath: submit() never sees it neither queued nor active
    }
    if (p->req.cancel->load()) {
      {
        std::lock_guard lock(mu_);
        --stats_.active;
        ++stats_.requests_done;
      }
      if (p->req.on_done) p->req.on_done(cancelled());
      continue;
    }
    // The free slot whose cache shares the longest prefix with the prompt.
    const std::vector<int32_t>& prompt = p->req.prompt;
    Slot* best = nullptr;
    size_t best_common = 0;
    for (auto& s : slots_) {
      if (s->active) continue;
      const size_t limit = std::min(s->cached.size(), prompt.size());
      size_t common = 0;
      while (common < limit && s->cached[common] == prompt[common]) ++common;
      if (best == nullptr || common > best_common) {
        best = s.get();
        best_common = common;
      }
    }
    Slot& slot = *best;
    // A step needs at least one token to give logits.
    if (best_common == prompt.size()) --best_common;
    (void)gen_->rewind(slot.seq, static_cast<int64_t>(best_common));  // ≤ the position: cannot fail
    slot.cached.resize(best_common);
    slot.fed = best_common;
    slot.next = -1;
    slot.order = admitted_++;
    slot.outcome = Outcome{};
    slot.outcome.prompt_tokens = static_cast<int64_t>(prompt.size());
    slot.outcome.cached_tokens = static_cast<int64_t>(best_common);
    slot.outcome.queue_seconds = seconds_between(p->submitted, Clock::now());
    slot.sampler.emplace(Sampler::create(p->req.sampler).value());  // validated by submit()
    for (int32_t t : prompt) slot.sampler->accept(t);
    if (slot.drafter) {
      slot.drafter->clear();
      slot.drafter->push(prompt);
    }
    slot.text.emplace(model_.tokenizer(), /*sequence_start=*/false, /*special=*/p->req.special_text);
    slot.stops.emplace(p->req.stop);
    slot.active = std::move(p);
  }
}

void Engine::embed() {
  if (!embedding_) {
    std::lock_guard lock(mu_);
    if (embed_queue_.empty()) return;
    embedding_ = std::move(embed_queue_.front());
    embed_queue_.pop_front();
    note_queued();
  }
  if (embedding_->req.cancel->load()) return finish_embedding(unavailable("the client went away"));
  // The free slots, those holding the fewest cached tokens first: prompts cached elsewhere stay.
  std::vector<Slot*> free;
  for (auto& s : slots_) {
    if (!s->active) free.push_back(s.get());
  }
  if (free.empty()) return;  // the next turn, once a slot is free
  std::stable_sort(free.begin(), free.end(), [](Slot* a, Slot* b) { return a->cached.size() < b->cached.size(); });
  const std::vector<std::vector<int32_t>>& inputs = embedding_->req.inputs;
  const size_t done = embedding_->vectors.size();
  const size_t n = std::min(inputs.size() - done, free.size());
  std::vector<int64_t> seqs;
  for (size_t i = 0; i < n; ++i) {
    seqs.push_back(free[i]->seq);
    free[i]->cached.clear();  // its cells will hold the input (or what a failed step left)
  }
  EmbedOptions eo{
      .pooling = model_.hparams().pooling, .normalize = embedding_->req.normalize, .n_batch = options_.n_batch};
  auto vectors = tensorpc::embed(*gen_, std::span<const std::vector<int32_t>>(inputs).subspan(done, n), seqs, eo);
  int64_t tokens = 0;
  for (size_t i = done; i < done + n; ++i) tokens += static_cast<int64_t>(inputs[i].size());
  {
    std::lock_guard lock(mu_);
    if (vectors.ok()) stats_.prompt_tokens += static_cast<uint64_t>(tokens);
    if (!vectors.ok()) stats_.last_error = vectors.status().to_string();
    stats_.last_step_failed = !vectors.ok();
  }
  if (!vectors.ok()) {
    if (options_.log) options_.log("an embedding step failed: " + vectors.status().to_string());
    return finish_embedding(vectors.status());
  }
  for (auto& v : vectors.value()) embedding_->vectors.push_back(std::move(v));
  if (embedding_->vectors.size() == inputs.size()) finish_embedding(std::move(embedding_->vectors));
}

void Engine::finish_embedding(StatusOr<std::vector<std::vector<float>>> result) {
  const std::unique_ptr<PendingEmbed> ended = std::move(embedding_);
  {
    std::lock_guard lock(mu_);
    ++stats_.requests_done;
  }
  if (ended->req.on_done) ended->req.on_done(std::move(result));
}

void Engine::finish(Slot& slot, Finish finish, Status status) {
  Pending& p = *slot.active;
  if (finish != Finish::error && finish != Finish::cancelled) {
    // What the detokenizer and the stop matcher still hold.
    std::string rest = slot.stops->push(slot.text->flush()).emit;
    rest += slot.stops->flush();
    if (!rest.empty() && p.req.on_text) p.req.on_text(rest);
  }
  slot.outcome.finish = finish;
  slot.outcome.status = std::move(status);
  slot.outcome.seconds = seconds_between(p.submitted, Clock::now());
  {
    // Counted before the caller hears of the end, so what it reads next includes it.
    std::lock_guard lock(mu_);
    --stats_.active;
    ++stats_.requests_done;
  }
  const std::unique_ptr<Pending> ended = std::move(slot.active);
  slot.next = -1;
  if (ended->req.on_done) ended->req.on_done(slot.outcome);
}

void Engine::draft(Slot& s, int64_t& budget) {
  s.step_tokens.assign(1, s.next);
  // Log probabilities need every logit of each token: such a slot decodes one token a step.
  if (!s.drafter || s.active->req.top_logprobs >= 0 || budget <= 0) return;
  // The step yields a token more than it drafts, and must fit the slot's context.
  int64_t limit = std::min(budget, slot_context() - gen_->position(s.seq) - 1);
  const int64_t max_tokens = s.active->req.max_tokens;
  if (max_tokens > 0) limit = std::min(limit, max_tokens - s.outcome.completion_tokens - 1);
  if (limit <= 0) return;
  // A draft model's failed step costs the slot its draft, not its request: the draft is only a guess.
  StatusOr<std::vector<int32_t>> d = s.drafter->draft(static_cast<size_t>(limit));
  if (!d.ok()) {
    if (options_.log && !draft_failed_) {
      options_.log("draft model: " + d.status().to_string() + " (steps go on without its drafts while it fails)");
    }
    draft_failed_ = true;
    return;
  }
  draft_failed_ = false;
  s.step_tokens.insert(s.step_tokens.end(), d.value().begin(), d.value().end());
  budget -= static_cast<int64_t>(d.value().size());
}

bool Engine::take_token(Slot& s, int32_t t, int64_t position, std::span<const float> logits) {
  const Tokenizer& tok = model_.tokenizer();
  Pending& p = *s.active;
  if (s.outcome.completion_tokens == 0) s.outcome.first_token_seconds = seconds_between(p.submitted, Clock::now());
  ++s.outcome.completion_tokens;
  note_generated(1);
  s.sampler->accept(t, /*generated=*/true);
  if (s.drafter) s.drafter->push(t);
  if (p.req.stop_at_eos && tok.is_end_of_generation(t)) {
    finish(s, Finish::stop);
    return false;
  }
  if (p.req.top_logprobs >= 0 && p.req.on_logprobs) {
    p.req.on_logprobs(logprobs_of(logits, t, p.req.top_logprobs));
  }
  const StopMatcher::Result piece = s.stops->push(s.text->push(t));
  if (!piece.emit.empty() && p.req.on_text && !p.req.on_text(piece.emit)) {
    finish(s, Finish::cancelled);
    return false;
  }
  if (piece.stopped) {
    s.outcome.stop_string = s.stops->stopped_by();
    finish(s, Finish::stop);
    return false;
  }
  const bool full = position + 1 > slot_context();
  if ((p.req.max_tokens > 0 && s.outcome.completion_tokens >= p.req.max_tokens) || full) {
    finish(s, Finish::length);
    return false;
  }
  s.next = t;
  return true;
}

void Engine::step() {
  const int64_t n_vocab = model_.hparams().n_vocab;
  for (auto& s : slots_) {
    if (s->active && s->active->req.cancel->load()) finish(*s, Finish::cancelled);
  }

  // The batch: every decoding slot's token and draft, then prompt chunks first come, first served.
  struct Entry {
    Slot* slot;
    size_t count;  // prompt tokens fed (0: a decode step)
    bool sample;   // its logits give the slot's next token
  };
  std::vector<Entry> entries;
  std::vector<SequenceTokens> batch;
  std::vector<Slot*> prefilling;
  for (auto& s : slots_) {
    if (s->active && s->next < 0) prefilling.push_back(s.get());
  }
  int64_t budget = options_.n_batch;
  for (auto& s : slots_) budget -= s->active && s->next >= 0 ? 1 : 0;
  // Drafts take what the decoding slots' tokens leave, half of it while prompts wait.
  int64_t drafts = prefilling.empty() ? budget : budget / 2;
  budget -= drafts;
  for (auto& s : slots_) {
    if (!s->active || s->next < 0) continue;
    draft(*s, drafts);
    entries.push_back({s.get(), 0, true});
    batch.push_back({s->seq, s->step_tokens, /*all_rows=*/s->step_tokens.size() > 1});
  }
  budget += drafts;  // what the drafts left
  std::sort(prefilling.begin(), prefilling.end(), [](Slot* a, Slot* b) { return a->order < b->order; });
  bool fed_prompt = false;
  for (Slot* s : prefilling) {
    // The oldest prompt moves at least a token a step, however many slots decode.
    if (budget <= 0 && fed_prompt) break;
    fed_prompt = true;
    const std::vector<int32_t>& prompt = s->active->req.prompt;
    const size_t left = prompt.size() - s->fed;
    const size_t count = std::min(left, static_cast<size_t>(std::max<int64_t>(budget, 1)));
    entries.push_back({s, count, count == left});
    batch.push_back({s->seq, std::span<const int32_t>(prompt.data() + s->fed, count)});
    budget -= static_cast<int64_t>(count);
  }
  if (batch.empty()) return;

  // Candidates picked on the device when every sampling slot can decide from a few.
  int64_t k = gen_->can_select_on_device() ? 1 : 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i].sample) continue;
    const Slot& s = *entries[i].slot;
    // Log probabilities need the softmax's whole denominator: every logit.
    const int64_t need =
        s.active->req.top_logprobs >= 0
            ? 0
            : draft_candidates(*s.sampler, n_vocab, entries[i].count > 0 ? 0 : s.step_tokens.size() - 1);
    k = need == 0 ? 0 : (k == 0 ? 0 : std::max(k, need));
  }
  auto out = gen_->eval_batch(batch, k);
  {
    std::lock_guard lock(mu_);
    ++stats_.steps;
    if (!out.ok()) stats_.last_error = out.status().to_string();
    stats_.last_step_failed = !out.ok();
  }
  if (!out.ok()) {
    if (options_.log) {
      options_.log("a step failed, ending its " + std::to_string(entries.size()) + " request" +
                   (entries.size() == 1 ? "" : "s") + ": " + out.status().to_string());
    }
    for (const Entry& e : entries) {
      // What the failed step left in the cells is unknown: the slot starts over next time.
      e.slot->cached.clear();
      (void)gen_->rewind(e.slot->seq, 0);
      finish(*e.slot, Finish::error, out.status());
    }
    return;
  }
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].count > 0) continue;
      ++stats_.decode_steps;
      stats_.draft_tokens += batch[i].tokens.size() - 1;
    }
  }
  const size_t stride = k > 0 ? static_cast<size_t>(2 * k) : static_cast<size_t>(n_vocab);
  std::vector<float> all_logits;  // read once, when some slot's candidates cannot decide
  size_t next_row = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    Slot& s = *entries[i].slot;
    const size_t first = next_row;  // the entry's rows: after each token with all_rows, else after its last
    const size_t n_rows = batch[i].all_rows ? batch[i].tokens.size() : 1;
    next_row += n_rows;
    if (entries[i].count > 0) {
      const std::vector<int32_t>& prompt = s.active->req.prompt;
      s.cached.insert(s.cached.end(), prompt.begin() + static_cast<std::ptrdiff_t>(s.fed),
                      prompt.begin() + static_cast<std::ptrdiff_t>(s.fed + entries[i].count));
      s.fed += entries[i].count;
      std::lock_guard lock(mu_);
      stats_.prompt_tokens += entries[i].count;
    }
    if (!entries[i].sample) continue;

    const std::span<const float> rows = std::span<const float>(out.value()).subspan(first * stride, n_rows * stride);
    const auto read = [&](size_t position) -> StatusOr<std::span<const float>> {
      if (all_logits.empty()) {
        TENSORPC_ASSIGN_OR_RETURN(all_logits, gen_->read_logits());
      }
      return std::span<const float>(all_logits)
          .subspan((first + position) * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab));
    };
    // The sequence's position in plain decoding after the entry's first row: now, less the rows after it.
    const int64_t base = gen_->position(s.seq) - static_cast<int64_t>(n_rows - 1);
    const std::span<const int32_t> drafted =
        entries[i].count > 0 ? std::span<const int32_t>() : std::span<const int32_t>(s.step_tokens).subspan(1);
    const bool logprobs = s.active->req.top_logprobs >= 0;  // then k is 0: the row is every logit
    int64_t taken = 0;
    const auto take = [&](int32_t t) {
      if (entries[i].count == 0) {
        // Counted before take_token() may end the request, as the tokens are.
        const bool accepted = static_cast<size_t>(taken) < drafted.size() && t == drafted[static_cast<size_t>(taken)];
        std::lock_guard lock(mu_);
        ++stats_.decoded_tokens;
        stats_.draft_accepted += accepted ? 1 : 0;
      }
      return take_token(s, t, base + taken++, logprobs ? rows.first(stride) : std::span<const float>());
    };
    auto walk = walk_draft(*s.sampler, n_vocab, {.rows = rows, .k = k, .logits = read}, drafted, take);
    if (!walk.ok()) {
      if (s.active) finish(s, Finish::error, walk.status());
      continue;
    }
    if (entries[i].count > 0) continue;
    const DraftWalk w = walk.value();
    // Plain decoding would have fed `next` and the draft tokens before the last one taken.
    s.cached.insert(s.cached.end(), s.step_tokens.begin(),
                    s.step_tokens.begin() + static_cast<std::ptrdiff_t>(1 + w.fed));
    (void)gen_->rewind(s.seq, base + static_cast<int64_t>(w.fed));  // ≤ the position: cannot fail
    if (!drafted.empty()) s.drafter->record(drafted.size(), w.picked);
  }
}

}  // namespace tensorpc::serve
