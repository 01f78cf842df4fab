// Running a placed llama model (see generator.h).
#include "model/runtime/generator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

namespace tensorpc {

Generator::Generator(const LlamaModel& model, ModelPlacement& placement, GeneratorOptions options)
    : model_(model),
      placement_(&placement),
      options_(options),
      n_ctx_(placement.n_ctx()),
      scheduler_(std::make_unique<Scheduler>(placement.devices(), options.scheduler)),
      positions_(static_cast<size_t>(std::max<int64_t>(1, options.n_seq)), 0),
      history_(positions_.size()) {}

int64_t Generator::seq_ctx() const { return n_ctx_ / n_seq(); }

SchedulerCounters Generator::totals() const {
  SchedulerCounters sum = carried_;
  if (scheduler_) sum += scheduler_->totals();
  return sum;
}

std::string Generator::describe() const { return scheduler_ ? scheduler_->describe() : std::string(); }

Status Generator::reset() {
  std::fill(positions_.begin(), positions_.end(), 0);
  for (auto& h : history_) h.clear();
  // With no placement (a recovery failed), the next step makes a new one, its cache unused.
  return placement_ != nullptr ? placement_->clear_cache() : Status();
}

Status Generator::rewind(int64_t seq, int64_t position) {
  if (seq < 0 || seq >= n_seq()) {
    return invalid_argument("generator: no sequence " + std::to_string(seq) + " of " + std::to_string(n_seq()));
  }
  int64_t& at = positions_[static_cast<size_t>(seq)];
  if (position < 0 || position > at) {
    return invalid_argument("generator: cannot rewind to position " + std::to_string(position) + " from " +
                            std::to_string(at));
  }
  at = position;
  history_[static_cast<size_t>(seq)].resize(static_cast<size_t>(position));
  return Status();
}

Status Generator::check_candidates(int64_t k, int64_t least) const {
  if (k >= least && k <= model_.hparams().n_vocab) return Status();
  return invalid_argument("generator: " + std::to_string(k) + " candidates asked of a vocabulary of " +
                          std::to_string(model_.hparams().n_vocab));
}

StatusOr<std::vector<float>> Generator::eval(std::span<const int32_t> tokens) { return run(tokens, 0); }

StatusOr<std::vector<float>> Generator::eval_all(std::span<const int32_t> tokens) {
  return run(tokens, 0, /*all_logits=*/true);
}

StatusOr<std::vector<float>> Generator::eval_top(std::span<const int32_t> tokens, int64_t k) {
  TENSORPC_RETURN_IF_ERROR(check_candidates(k, 1));
  return run(tokens, k);
}

StatusOr<std::vector<float>> Generator::eval_top_all(std::span<const int32_t> tokens, int64_t k) {
  TENSORPC_RETURN_IF_ERROR(check_candidates(k, 1));
  return run(tokens, k, /*all_logits=*/true);
}

StatusOr<int32_t> Generator::eval_sample(std::span<const int32_t> tokens, int64_t k, const DeviceSampling& sampling) {
  TENSORPC_RETURN_IF_ERROR(check_candidates(k, 1));
  TENSORPC_RETURN_IF_ERROR(sampling.settings.validate("generator"));
  if (sampling.recent.empty()) return invalid_argument("generator: sampling needs at least one recent slot");
  TENSORPC_ASSIGN_OR_RETURN(const std::vector<float> out, run(tokens, k, false, &sampling));
  int32_t token = 0;
  std::memcpy(&token, out.data(), sizeof token);  // the i32 result, read into a float's place
  if (token == kSampleBadCandidates) return internal_error("generator: the device refused its own top_k candidates");
  return token;
}

bool Generator::device_computes(const Tensor& node) const {
  if (!options_.select_on_device || placement_ == nullptr || placement_->layer_device().empty()) return false;
  return placement_->devices()[placement_->layer_device().back()]->supports(node);
}

bool Generator::can_select_on_device() const {
  Context probe;
  return device_computes(*probe.top_k(probe.new_tensor(DType::f32, {2}), 1));
}

bool Generator::can_sample_on_device() const {
  Context probe;
  Tensor* top = probe.top_k(probe.new_tensor(DType::f32, {2}), 1);
  const Tensor* token = probe.sample(top, probe.new_tensor(DType::i32, {1}), probe.new_tensor(DType::i32, {2}),
                                     SampleSettings{}, 2);
  return device_computes(*top) && device_computes(*token);
}

StatusOr<std::vector<float>> Generator::read_logits() const {
  if (!built_ || built_->top == nullptr)
    return invalid_argument("generator: no step of eval_top() to read the logits of");
  const Tensor& logits = *built_->step.logits;
  std::vector<float> out(static_cast<size_t>(logits.nelements()));
  TENSORPC_RETURN_IF_ERROR(logits.buffer->get(logits, out.data(), 0, logits.nbytes()));
  return out;
}

StatusOr<std::vector<float>> Generator::eval_batch(std::span<const SequenceTokens> batch, int64_t k) {
  TENSORPC_RETURN_IF_ERROR(check_candidates(k, 0));
  TENSORPC_ASSIGN_OR_RETURN(const StepTokens in, batch_tokens(batch));
  std::vector<float> out;
  TENSORPC_RETURN_IF_ERROR(step(in, k, /*all_logits=*/false, out));
  return out;
}

StatusOr<std::vector<float>> Generator::eval_hidden(std::span<const SequenceTokens> batch) {
  TENSORPC_ASSIGN_OR_RETURN(StepTokens in, batch_tokens(batch));
  in.last.clear();
  in.hidden = true;
  std::vector<float> out;
  TENSORPC_RETURN_IF_ERROR(step(in, 0, /*all_logits=*/false, out));
  return out;
}

StatusOr<Generator::StepTokens> Generator::batch_tokens(std::span<const SequenceTokens> batch) const {
  if (batch.empty()) return invalid_argument("generator: an empty batch");
  StepTokens in;
  std::vector<bool> seen(positions_.size(), false);
  for (const SequenceTokens& e : batch) {
    if (e.seq < 0 || e.seq >= n_seq()) {
      return invalid_argument("generator: no sequence " + std::to_string(e.seq) + " of " + std::to_string(n_seq()));
    }
    if (seen[static_cast<size_t>(e.seq)]) {
      return invalid_argument("generator: sequence " + std::to_string(e.seq) + " twice in one batch");
    }
    if (e.tokens.empty()) return invalid_argument("generator: sequence " + std::to_string(e.seq) + " has no tokens");
    seen[static_cast<size_t>(e.seq)] = true;
    in.tokens.insert(in.tokens.end(), e.tokens.begin(), e.tokens.end());
    in.seqs.insert(in.seqs.end(), e.tokens.size(), static_cast<int32_t>(e.seq));
    const size_t end = in.tokens.size();
    for (size_t i = e.all_rows ? end - e.tokens.size() : end - 1; i < end; ++i)
      in.last.push_back(static_cast<int32_t>(i));
  }
  return in;
}

StatusOr<std::vector<float>> Generator::run(std::span<const int32_t> tokens, int64_t k, bool all_logits,
                                            const DeviceSampling* sampling) {
  if (tokens.empty()) return invalid_argument("generator: no tokens to evaluate");
  // Refused before any chunk runs, so a prompt too long leaves the sequence where it was.
  const int64_t need = positions_[0] + static_cast<int64_t>(tokens.size());
  if (need > seq_ctx()) {
    return invalid_argument("generator: " + std::to_string(need) + " tokens do not fit the context of " +
                            std::to_string(seq_ctx()));
  }
  std::vector<float> logits;
  StepTokens in;
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(std::max<int64_t>(1, options_.n_batch)));
    in.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                     tokens.begin() + static_cast<std::ptrdiff_t>(begin + n));
    in.seqs.assign(n, 0);
    // all: this step's rows after the last step's; else the last step's result only
    if (!all_logits) logits.clear();
    TENSORPC_RETURN_IF_ERROR(step(in, k, all_logits, logits, sampling));
    begin += n;
  }
  return logits;
}

Status Generator::step(const StepTokens& in, int64_t k, bool all_logits, std::vector<float>& out,
                       const DeviceSampling* sampling) {
  if (placement_ == nullptr) TENSORPC_RETURN_IF_ERROR(recover(Status()));
  const size_t offset = out.size();
  Status s = step_once(in, k, all_logits, out, sampling);
  // A step that fails again after a recovery may have lost another server: a few tries, each bounded by its waits.
  constexpr int kTries = 3;
  for (int i = 0; i < kTries && !s.ok() && options_.recovery != nullptr; ++i) {
    TENSORPC_RETURN_IF_ERROR(recover(s));
    out.resize(offset);
    s = step_once(in, k, all_logits, out, sampling);
  }
  if (!s.ok()) return s;
  for (size_t i = 0; i < in.tokens.size(); ++i) history_[static_cast<size_t>(in.seqs[i])].push_back(in.tokens[i]);
  return Status();
}

Status Generator::recover(Status failure) {
  PlacementRecovery* r = options_.recovery;
  if (r == nullptr) return failure;
  std::vector<std::string> lost;
  if (placement_ != nullptr) {
    lost = r->lost(failure);
    if (lost.empty()) return failure;  // not a lost server: the step's own error
  }
  constexpr int kTries = 3;  // a server lost during the replay too
  for (int i = 0;; ++i) {
    const auto start = std::chrono::steady_clock::now();
    // Nothing of the old placement may outlive it: the plans and buffers the scheduler holds, the graph.
    built_.reset();
    if (scheduler_) carried_ += scheduler_->totals();
    scheduler_.reset();
    placement_ = nullptr;
    TENSORPC_ASSIGN_OR_RETURN(ModelPlacement * fresh, r->replace(lost, failure));
    if (fresh->n_ctx() != n_ctx_) {
      return internal_error("generator: the new placement holds " + std::to_string(fresh->n_ctx()) +
                            " positions, not " + std::to_string(n_ctx_));
    }
    placement_ = fresh;
    scheduler_ = std::make_unique<Scheduler>(placement_->devices(), options_.scheduler);
    const auto placed = std::chrono::steady_clock::now();
    auto replayed = replay();
    const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    r->recovered(replayed.ok() ? replayed.value() : 0, seconds(start, placed),
                 seconds(placed, std::chrono::steady_clock::now()), replayed.status());
    if (replayed.ok()) return Status();
    failure = replayed.status();
    lost = r->lost(failure);
    if (lost.empty() || i + 1 == kTries) return failure.with_context("evaluating the sequences again");
  }
}

StatusOr<int64_t> Generator::replay() {
  std::fill(positions_.begin(), positions_.end(), 0);
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, options_.n_batch));
  std::vector<size_t> done(history_.size(), 0);
  int64_t total = 0;
  std::vector<float> out;
  for (;;) {
    // The next n_batch tokens, each sequence's run after the last's.
    StepTokens in;
    for (size_t seq = 0; seq < history_.size() && in.tokens.size() < chunk; ++seq) {
      const std::vector<int32_t>& h = history_[seq];
      const size_t n = std::min(h.size() - done[seq], chunk - in.tokens.size());
      if (n == 0) continue;
      in.tokens.insert(in.tokens.end(), h.begin() + static_cast<std::ptrdiff_t>(done[seq]),
                       h.begin() + static_cast<std::ptrdiff_t>(done[seq] + n));
      in.seqs.insert(in.seqs.end(), n, static_cast<int32_t>(seq));
      in.last.push_back(static_cast<int32_t>(in.tokens.size() - 1));
      done[seq] += n;
    }
    if (in.tokens.empty()) return total;
    out.clear();
    TENSORPC_RETURN_IF_ERROR(step_once(in, 0, false, out, nullptr));
    total += static_cast<int64_t>(in.tokens.size());
  }
}

Status Generator::step_once(const StepTokens& in, int64_t k, bool all_logits, std::vector<float>& out,
                            const DeviceSampling* sampling) {
  const LlamaHparams& hp = model_.hparams();
  const size_t n = in.tokens.size();
  const int64_t n_seq = this->n_seq();
  // Each token's position in its sequence, checked against the room a sequence has.
  std::vector<int64_t> next = positions_;
  for (size_t i = 0; i < n; ++i) {
    if (in.tokens[i] < 0 || in.tokens[i] >= hp.n_vocab) {
      return invalid_argument("generator: token " + std::to_string(in.tokens[i]) + " is not in the vocabulary");
    }
    ++next[static_cast<size_t>(in.seqs[i])];
  }
  for (int64_t need : next) {
    if (need > seq_ctx()) {
      return invalid_argument("generator: " + std::to_string(need) + " tokens do not fit the context of " +
                              std::to_string(seq_ctx()));
    }
  }
  const int64_t end = *std::max_element(next.begin(), next.end());  // positions of the longest sequence after the step
  std::vector<int32_t> positions(n);
  std::vector<int64_t> at = positions_;
  for (size_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(at[static_cast<size_t>(in.seqs[i])]++);
  const int64_t n_kv = kv_window(end * n_seq, seq_ctx() * n_seq, options_.kv_granularity * n_seq);

  LlamaStepShape shape{.n_tokens = static_cast<int64_t>(n),
                       .n_kv = n_kv,
                       .all_logits = all_logits,
                       .n_out = in.last.empty() ? 0 : static_cast<int64_t>(in.last.size()),
                       .cells = n_seq > 1,
                       .hidden = in.hidden};
  const auto same = [](const LlamaStepShape& a, const LlamaStepShape& b) {
    return a.n_tokens == b.n_tokens && a.n_kv == b.n_kv && a.all_logits == b.all_logits && a.n_out == b.n_out &&
           a.cells == b.cells && a.hidden == b.hidden;
  };
  const auto same_sampling = [&](const BuiltStep& b) {
    if (sampling == nullptr) return b.token == nullptr;
    return b.token != nullptr && b.settings == sampling->settings &&
           b.recent->ne[0] == static_cast<int64_t>(sampling->recent.size());
  };
  const bool reuse = built_ && same(built_->shape, shape) && built_->k == k && same_sampling(*built_);
  if (!reuse) {
    built_.reset();
    auto b = std::make_unique<BuiltStep>();
    b->step = build_llama_step(b->ctx, hp, model_.weights(), placement_->cache(), shape);
    b->shape = shape;
    if (k > 0) {
      // The logits stay an output: read_logits() can still read them.
      b->top = b->ctx.top_k(b->step.logits, static_cast<int>(k));
      b->k = k;
      if (sampling != nullptr) {
        b->recent = b->ctx.new_tensor(DType::i32, {static_cast<int64_t>(sampling->recent.size())}, "recent");
        b->draw = b->ctx.new_tensor(DType::i32, {2}, "draw");
        b->recent->flags |= kFlagInput;
        b->draw->flags |= kFlagInput;
        b->token = b->ctx.sample(b->top, b->recent, b->draw, sampling->settings, hp.n_vocab);
        b->settings = sampling->settings;
        b->graph = Graph::build({b->step.logits, b->token});
      } else {
        b->graph = Graph::build({b->step.logits, b->top});
      }
    } else {
      b->graph = Graph::build({in.hidden ? b->step.hidden : b->step.logits});
    }
    built_ = std::move(b);
  }
  const LlamaStep& step = built_->step;
  Graph& g = built_->graph;
  TENSORPC_RETURN_IF_ERROR(reuse ? scheduler_->allocate_again(g) : scheduler_->allocate(g));

  const auto set = [](Tensor* t, const auto& values) {
    return t->buffer->set(*t, values.data(), 0, sizeof(values[0]) * values.size());
  };
  TENSORPC_RETURN_IF_ERROR(set(step.tokens, in.tokens));
  TENSORPC_RETURN_IF_ERROR(set(step.positions, positions));
  if (step.cells != nullptr) {
    std::vector<int32_t> cells(n);
    for (size_t i = 0; i < n; ++i) cells[i] = static_cast<int32_t>(cache_cell(in.seqs[i], positions[i], n_seq));
    TENSORPC_RETURN_IF_ERROR(set(step.cells, cells));
  }
  if (step.out_rows != nullptr) TENSORPC_RETURN_IF_ERROR(set(step.out_rows, in.last));
  if (step.mask != nullptr) TENSORPC_RETURN_IF_ERROR(set(step.mask, batch_mask(in.seqs, positions, n_seq, n_kv)));
  if (step.mask_swa != nullptr) {
    TENSORPC_RETURN_IF_ERROR(set(step.mask_swa, batch_mask(in.seqs, positions, n_seq, n_kv, hp.n_swa)));
  }
  if (sampling != nullptr) {
    TENSORPC_RETURN_IF_ERROR(set(built_->recent, sampling->recent));
    const std::array<uint32_t, 2> draw{static_cast<uint32_t>(sampling->draw), static_cast<uint32_t>(sampling->draw >> 32)};
    TENSORPC_RETURN_IF_ERROR(set(built_->draw, draw));
  }
  const Tensor& result = built_->token ? *built_->token
                         : built_->top ? *built_->top
                         : step.hidden ? *step.hidden
                                       : *step.logits;
  const size_t offset = out.size();
  out.resize(offset + static_cast<size_t>(result.nelements()));
  TENSORPC_RETURN_IF_ERROR(scheduler_->compute_and_read(g, result, out.data() + offset));
  positions_ = std::move(next);
  return Status();
}

}  // namespace tensorpc
