// StopMatcher (serve/stop_strings.h): stop strings found across piece
// boundaries, partial matches held back and released, the first stop string
// to complete winning, and the same answer however the text is cut.
#include "serve/stop_strings.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace tensorpc::serve {
namespace {

using Strings = std::vector<std::string>;

struct Outcome {
  std::string emitted;  // everything push() and flush() gave, in order
  bool stopped = false;
  size_t max_held = 0;  // the most text fed but not emitted after any push
};

// Feeds `pieces` one by one, then flushes.
Outcome feed(const Strings& stops, const Strings& pieces) {
  StopMatcher matcher(stops);
  Outcome run;
  size_t fed = 0;
  for (const std::string& piece : pieces) {
    StopMatcher::Result r = matcher.push(piece);
    run.emitted += r.emit;
    fed += piece.size();
    if (r.stopped) {
      run.stopped = true;
      break;
    }
    run.max_held = std::max(run.max_held, fed - run.emitted.size());
  }
  run.emitted += matcher.flush();
  return run;
}

// What the text should give: cut before the stop string that ends first
// (the longest of those ending at the same byte), or all of it.
std::string reference(const Strings& stops, const std::string& text) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t longest = 0;
    for (const std::string& stop : stops) {
      if (!stop.empty() && stop.size() <= end && text.compare(end - stop.size(), stop.size(), stop) == 0) {
        longest = std::max(longest, stop.size());
      }
    }
    if (longest > 0) return text.substr(0, end - longest);
  }
  return text;
}

TEST(StopMatcher, WithoutStopStringsPiecesPassThroughAsTheyAre) {
  StopMatcher matcher({});
  for (const char* piece : {"Hello", ", ", "", "world\xe2"}) {
    const StopMatcher::Result r = matcher.push(piece);
    EXPECT_EQ(r.emit, piece);
    EXPECT_FALSE(r.stopped);
  }
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  StopMatcher matcher({"", ""});
  EXPECT_EQ(matcher.push("abc").emit, "abc");
}

TEST(StopMatcher, StopInsideOnePieceEmitsTheTextBeforeIt) {
  StopMatcher matcher({"</s>"});
  const StopMatcher::Result r = matcher.push("The end.</s>More text");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "The end.");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopMatcher, StopSpanningPiecesIsFound) {
  StopMatcher matcher({"<|end|>"});
  StopMatcher::Result a = matcher.push("Hello <|e");
  EXPECT_EQ(a.emit, "Hello ");
  EXPECT_FALSE(a.stopped);
  StopMatcher::Result b = matcher.push("nd");
  EXPECT_EQ(b.emit, "");
  EXPECT_FALSE(b.stopped);
  StopMatcher::Result c = matcher.push("|> after");
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.emit, "");
}

TEST(StopMatcher, PartialPrefixIsHeldBackUntilItCannotMatch) {
  StopMatcher matcher({"###"});
  EXPECT_EQ(matcher.push("a#").emit, "a");
  EXPECT_EQ(matcher.push("#").emit, "");
  const StopMatcher::Result r = matcher.push("b");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emit, "##b");
}

TEST(StopMatcher, FlushReleasesTheHeldBackTail) {
  StopMatcher matcher({"###"});
  EXPECT_EQ(matcher.push("abc##").emit, "abc");
  EXPECT_EQ(matcher.flush(), "##");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, AfterAStopNothingMoreComesOut) {
  StopMatcher matcher({"x"});
  EXPECT_TRUE(matcher.push("abxcd").stopped);
  const StopMatcher::Result later = matcher.push("more");
  EXPECT_TRUE(later.stopped);
  EXPECT_EQ(later.emit, "");
  EXPECT_EQ(matcher.flush(), "");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopMatcher, StopAtTheVeryStartEmitsNothing) {
  StopMatcher matcher({"User:"});
  const StopMatcher::Result r = matcher.push("User: hi");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
}

TEST(StopMatcher, TheStopStringThatEndsFirstWins) {
  // "bc" is complete at the third byte, before "abcd" could be.
  StopMatcher matcher({"abcd", "bc"});
  const StopMatcher::Result r = matcher.push("abcd");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "a");
}

TEST(StopMatcher, OfStopStringsEndingTogetherTheLongerWins) {
  StopMatcher matcher({"cd", "bcd"});
  const StopMatcher::Result r = matcher.push("abcde");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "a");
}

TEST(StopMatcher, OverlappingStopsHoldBackTheLongestPartialMatch) {
  StopMatcher matcher({"xyz", "yzw"});
  EXPECT_EQ(matcher.push("axy").emit, "a");  // "xy" may become "xyz"
  EXPECT_EQ(matcher.push("zw").emit, "");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopMatcher, SelfOverlappingStopIsFoundAfterAFalseStart) {
  // "aab" in "aaab": the first "aa" is a false start a naive restart would miss.
  StopMatcher matcher({"aab"});
  std::string emitted;
  for (const char* piece : {"a", "a", "a"}) {
    const StopMatcher::Result r = matcher.push(piece);
    EXPECT_FALSE(r.stopped);
    emitted += r.emit;
  }
  EXPECT_EQ(emitted, "a");
  const StopMatcher::Result r = matcher.push("b");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(emitted + r.emit, "a");
}

TEST(StopMatcher, MultiByteStopStringsAreCutBetweenCharacters) {
  // "\xe2\x80\x94" is an em dash; "\xe2\x80\x93" (en dash) shares its first two bytes.
  StopMatcher matcher({"\xe2\x80\x94"});
  EXPECT_EQ(matcher.push("a\xe2\x80").emit, "a");
  EXPECT_EQ(matcher.push("\x93").emit, "\xe2\x80\x93");
  const StopMatcher::Result r = matcher.push("b\xe2\x80\x94");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "b");
}

TEST(StopMatcher, ByteByBytePiecesGiveTheSameAnswer) {
  const Strings stops = {"\n\nUser:", "###"};
  const std::string text = "Answer: 42.\n\nUse it.\n\nUser: next";
  Strings bytes;
  for (const char c : text) bytes.emplace_back(1, c);
  const Outcome whole = feed(stops, {text});
  const Outcome split = feed(stops, bytes);
  EXPECT_EQ(whole.emitted, "Answer: 42.\n\nUse it.");
  EXPECT_EQ(split.emitted, whole.emitted);
  EXPECT_TRUE(split.stopped);
}

TEST(StopMatcher, AnySplitOfRandomTextMatchesTheReference) {
  // Small alphabets make overlaps and false starts common.
  std::mt19937 rng(20240611);
  const Strings stop_sets[] = {{"ab"}, {"aab", "ba"}, {"aaa", "abab", "b"}, {"abba", "bab", "aabb", "bbbb"}};
  for (int round = 0; round < 2000; ++round) {
    const Strings& stops = stop_sets[round % 4];
    std::string text;
    const size_t length = rng() % 24;
    for (size_t i = 0; i < length; ++i) text += "ab"[rng() % 2];
    Strings pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min<size_t>(text.size() - at, rng() % 5);  // empty pieces too
      pieces.push_back(text.substr(at, n));
      at += n;
    }
    const std::string expected = reference(stops, text);
    const Outcome run = feed(stops, pieces);
    ASSERT_EQ(run.emitted, expected) << "text " << text << " round " << round;
    EXPECT_EQ(run.stopped, expected.size() != text.size()) << text;
    size_t longest = 0;
    for (const std::string& stop : stops) longest = std::max(longest, stop.size());
    EXPECT_LT(run.max_held, longest) << "held back more than a partial stop string: " << text;
  }
}

TEST(StopMatcher, LongStopStringsCostTimeInThePieceLength) {
  // A megabyte-long stop string that never matches, fed a megabyte byte by
  // byte: quadratic matching would take minutes.
  const std::string stop = std::string(1 << 20, 'a') + "b";
  StopMatcher matcher({stop});
  std::string emitted;
  for (int i = 0; i < (1 << 20); ++i) emitted += matcher.push("a").emit;
  EXPECT_EQ(emitted, "");  // all of it could still become the stop string
  EXPECT_EQ(matcher.push("c").emit.size(), (1u << 20) + 1);
}

}  // namespace
}  // namespace tensorpc::serve
