// LruStore: values by key, in order of last use — the one store behind every
// cache that forgets what was used the longest ago.
//
// It keeps order and lookup only; what "full" means (a count, a byte total)
// is the owner's, who calls pop_oldest() until it is satisfied. find() and
// put() make an entry the most recently used; peek() does not. Not
// thread-safe: the owner locks it, or uses it from one thread.
#pragma once

#include <cstddef>
#include <iterator>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

namespace tensorpc {

template <typename Key, typename Value>
class LruStore {
 public:
  using Entry = std::pair<Key, Value>;

  // The value under `key`, now the most recently used; null when absent.
  Value* find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }
  // As find(), without changing the order.
  const Value* peek(const Key& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->second;
  }
  // Stores `value` under `key` (replacing what was there) as the most
  // recently used; the value now stored.
  Value& put(Key key, Value value) {
    erase(key);
    order_.emplace_front(std::move(key), std::move(value));
    index_.emplace(order_.front().first, order_.begin());
    return order_.front().second;
  }
  bool erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    order_.erase(it->second);
    index_.erase(it);
    return true;
  }
  // Removes every entry for which pred(key, value) holds.
  template <typename Pred>
  void erase_if(Pred pred) {
    for (auto it = order_.begin(); it != order_.end();) {
      if (pred(it->first, it->second)) {
        index_.erase(it->first);
        it = order_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Removes and returns the entry used the longest ago; none when empty.
  std::optional<Entry> pop_oldest() {
    if (order_.empty()) return std::nullopt;
    index_.erase(order_.back().first);
    Entry oldest = std::move(order_.back());
    order_.pop_back();
    return oldest;
  }
  // Drops the entries used the longest ago until at most `n` are left.
  void trim_to(size_t n) {
    while (order_.size() > n) pop_oldest();
  }
  void clear() {
    order_.clear();
    index_.clear();
  }

  size_t size() const { return order_.size(); }
  bool empty() const { return order_.empty(); }
  // Entries from the most recently used to the oldest.
  auto begin() const { return order_.begin(); }
  auto end() const { return order_.end(); }

 private:
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<Key, typename std::list<Entry>::iterator> index_;
};

}  // namespace tensorpc
