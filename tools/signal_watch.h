// Signals taken by one thread of their own and turned into a flag, for the
// commands that stop or interrupt on Ctrl-C (`chat`, `serve`).
#pragma once

#include <signal.h>

#include <atomic>
#include <initializer_list>
#include <thread>

namespace tensorpc::tools {

// While it lives, `signals` are blocked in the thread that made it — and so in
// every thread started after it, which inherit the mask — and a watcher thread
// takes them with sigwait and sets `*raised`. No handler runs on whichever
// thread the kernel picked, so nothing depends on that thread getting back to
// read a flag: a sanitizer that defers handlers to a thread's next call, or a
// thread blocked for good, cannot hold a Ctrl-C back. Make it before starting
// any other thread; the destructor stops the watcher and restores the mask.
class SignalWatch {
 public:
  // What a signal does while `*raised` is still set from the one before.
  enum class Again {
    raise,        // sets it again (a chat clears it once it has stopped a reply)
    end_process,  // ends the process at once with status 128 + the signal: Ctrl-C
                  // twice leaves a `serve` that is still loading or shutting down
  };
  SignalWatch(std::initializer_list<int> signals, std::atomic<bool>* raised, Again again = Again::raise);
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

 private:
  sigset_t signals_{};
  sigset_t previous_{};
  int wake_signal_ = 0;  // sent to the watcher alone to end its wait
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

}  // namespace tensorpc::tools
