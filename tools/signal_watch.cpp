#include "signal_watch.h"

#include <pthread.h>

#include <cstdlib>

namespace tensorpc::tools {

SignalWatch::SignalWatch(std::initializer_list<int> signals, std::atomic<bool>* raised, Again again) {
  sigemptyset(&signals_);
  for (int s : signals) sigaddset(&signals_, s);
  wake_signal_ = *signals.begin();
  pthread_sigmask(SIG_BLOCK, &signals_, &previous_);
  watcher_ = std::thread([this, raised, again] {
    while (true) {
      int received = 0;
      if (sigwait(&signals_, &received) != 0) continue;
      if (stopping_.load()) return;
      const bool unanswered = raised->exchange(true);
      if (unanswered && again == Again::end_process) std::_Exit(128 + received);
    }
  });
}

SignalWatch::~SignalWatch() {
  stopping_.store(true);
  pthread_kill(watcher_.native_handle(), wake_signal_);  // blocked there too: its sigwait takes it
  watcher_.join();
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

}  // namespace tensorpc::tools
