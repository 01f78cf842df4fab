// Drafting with a draft model (draft_model.h).
#include "model/runtime/draft_model.h"

#include <algorithm>
#include <string>

#include "model/runtime/prompt_lookup.h"

namespace tensorpc {

ModelDrafter::ModelDrafter(Generator& draft_model, int64_t seq, int draft_max)
    : Drafter(draft_max), gen_(draft_model), seq_(seq) {}

StatusOr<int32_t> ModelDrafter::feed(std::span<const int32_t> tokens) {
  const int64_t k = gen_.can_select_on_device() ? 1 : 0;  // the largest logit and its id is all greedy needs
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, gen_.options().n_batch));
  std::vector<float> out;
  for (size_t at = 0; at < tokens.size(); at += chunk) {
    const SequenceTokens step{.seq = seq_, .tokens = tokens.subspan(at, std::min(chunk, tokens.size() - at))};
    TENSORPC_ASSIGN_OR_RETURN(out, gen_.eval_batch(std::span<const SequenceTokens>(&step, 1), k));
  }
  if (out.empty()) return internal_error("the draft model's step returned no logits");
  // top_k's row is the value, then its id (a float, from a device that may be a server's: checked).
  const float id = k > 0 ? out[1] : static_cast<float>(std::max_element(out.begin(), out.end()) - out.begin());
  const int64_t n_vocab = gen_.model().hparams().n_vocab;
  if (!(id >= 0.0f && id < static_cast<float>(n_vocab))) {
    return internal_error("the draft model's step named token " + std::to_string(id) + ", not one of its " +
                          std::to_string(n_vocab));
  }
  return static_cast<int32_t>(id);
}

StatusOr<std::vector<int32_t>> ModelDrafter::draft(size_t limit) {
  // The draft's tokens but the last are fed too: the sequence must hold the text and those.
  const int64_t room = gen_.seq_ctx() - static_cast<int64_t>(text_.size()) + 1;
  const size_t n = std::min({limit, length(), static_cast<size_t>(std::max<int64_t>(0, room))});
  if (n == 0 || text_.empty()) return std::vector<int32_t>{};
  const std::vector<int32_t>& held = gen_.history(seq_);
  const size_t n_held = std::min(held.size(), text_.size());
  size_t keep = static_cast<size_t>(
      std::mismatch(text_.begin(), text_.begin() + static_cast<std::ptrdiff_t>(n_held), held.begin()).first -
      text_.begin());
  if (keep == text_.size()) --keep;  // the text's last token is fed again: its step gives the first guess
  TENSORPC_RETURN_IF_ERROR(gen_.rewind(seq_, static_cast<int64_t>(keep)));
  std::vector<int32_t> out;
  TENSORPC_ASSIGN_OR_RETURN(int32_t token, feed(std::span<const int32_t>(text_).subspan(keep)));
  out.push_back(token);
  while (out.size() < n) {
    TENSORPC_ASSIGN_OR_RETURN(token, feed(std::span<const int32_t>(&token, 1)));
    out.push_back(token);
  }
  return out;
}

Status check_speculation(bool lookup, bool draft_model, int draft_max) {
  if (lookup && draft_model) return invalid_argument("prompt lookup and a draft model exclude each other");
  if ((lookup || draft_model) && draft_max < 1) return invalid_argument("draft_max must be at least 1");
  return Status();
}

StatusOr<std::unique_ptr<Drafter>> make_drafter(bool lookup, Generator* draft_model, int draft_max) {
  TENSORPC_RETURN_IF_ERROR(check_speculation(lookup, draft_model != nullptr, draft_max));
  if (draft_model != nullptr)
    return std::unique_ptr<Drafter>(std::make_unique<ModelDrafter>(*draft_model, 0, draft_max));
  if (lookup) return std::unique_ptr<Drafter>(std::make_unique<PromptLookup>(draft_max));
  return std::unique_ptr<Drafter>();
}

Status check_draft_vocabulary(const Tokenizer& model, const Tokenizer& draft) {
  return check_same_vocabulary(model, draft, "the draft model");
}

}  // namespace tensorpc
