// Clang's thread-safety analysis (-Wthread-safety), and a mutex it can see.
//
// State that a mutex protects says so in its declaration (GUARDED_BY), a
// function that expects the caller to hold a mutex says so in its signature
// (REQUIRES), and clang checks every access at compile time; other compilers
// see plain declarations. libstdc++'s std::mutex carries no annotations, so
// annotated state uses tensorpc::Mutex and MutexLock, thin wrappers over the
// standard ones (and Mutex::native() for a std::condition_variable).
#pragma once

#include <mutex>

#if defined(__clang__)
#define TENSORPC_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TENSORPC_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) TENSORPC_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY TENSORPC_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) TENSORPC_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) TENSORPC_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) TENSORPC_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define REQUIRES(...) TENSORPC_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) TENSORPC_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) TENSORPC_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TENSORPC_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) TENSORPC_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS TENSORPC_THREAD_ANNOTATION(no_thread_safety_analysis)

// An order ThreadSanitizer cannot see, said to it: what a thread did before
// happens_before(p) comes before what another does after happens_after(p)
// on the same p. For orders that go through another process (bytes sent to
// a peer server, which answers into the same memory only after reading
// them); no code elsewhere. Nothing in other builds.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TENSORPC_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define TENSORPC_TSAN 1
#endif
#ifdef TENSORPC_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
namespace tensorpc {
inline void happens_before(const void* p) { __tsan_release(const_cast<void*>(p)); }
inline void happens_after(const void* p) { __tsan_acquire(const_cast<void*>(p)); }
}  // namespace tensorpc
#else
namespace tensorpc {
inline void happens_before(const void*) {}
inline void happens_after(const void*) {}
}  // namespace tensorpc
#endif

namespace tensorpc {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { m_.lock(); }
  void unlock() RELEASE() { m_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return m_.try_lock(); }
  // For std::condition_variable waits: the caller already holds this mutex
  // (through a MutexLock) and the wait gives it back before returning.
  std::mutex& native() { return m_; }

 private:
  std::mutex m_;
};

// Holds a Mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& m) ACQUIRE(m) : m_(m) { m_.lock(); }
  ~MutexLock() RELEASE() { m_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& m_;
};

}  // namespace tensorpc
