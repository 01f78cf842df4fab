// StopMatcher; see stop_strings.h.
#include "serve/stop_strings.h"

#include <algorithm>
#include <utility>

namespace tensorpc::serve {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& text : stops) {
    if (text.empty()) continue;
    Stop stop;
    stop.text = std::move(text);
    // The Knuth-Morris-Pratt failure function.
    stop.failure.assign(stop.text.size(), 0);
    size_t k = 0;
    for (size_t i = 1; i < stop.text.size(); ++i) {
      while (k > 0 && stop.text[i] != stop.text[k]) k = stop.failure[k - 1];
      if (stop.text[i] == stop.text[k]) ++k;
      stop.failure[i] = k;
    }
    stops_.push_back(std::move(stop));
  }
}

StopMatcher::Result StopMatcher::push(std::string_view piece) {
  if (stopped_) return {"", true};
  if (stops_.empty()) return {std::string(piece), false};

  for (size_t i = 0; i < piece.size(); ++i) {
    const char c = piece[i];
    const Stop* completed = nullptr;
    for (Stop& stop : stops_) {
      while (stop.matched > 0 && stop.text[stop.matched] != c) stop.matched = stop.failure[stop.matched - 1];
      if (stop.text[stop.matched] == c) ++stop.matched;
      if (stop.matched == stop.text.size() && (completed == nullptr || stop.text.size() > completed->text.size())) {
        completed = &stop;
      }
    }
    if (completed != nullptr) {
      // The stop string ends at piece[i] and began inside held_ + piece
      // (held_ is as long as the longest partial match before this piece).
      std::string text = std::move(held_);
      text.append(piece.substr(0, i + 1));
      text.resize(text.size() - completed->text.size());
      held_.clear();
      stopped_ = true;
      stopped_by_ = completed->text;
      return {std::move(text), true};
    }
  }

  held_.append(piece);
  size_t hold = 0;
  for (const Stop& stop : stops_) hold = std::max(hold, stop.matched);
  Result result;
  result.emit = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return result;
}

std::string StopMatcher::flush() {
  std::string rest = stopped_ ? std::string() : std::move(held_);
  held_.clear();
  for (Stop& stop : stops_) stop.matched = 0;
  return rest;
}

}  // namespace tensorpc::serve
