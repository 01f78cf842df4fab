// TENSORPC_ASSIGN_OR_RETURN: the one way to unwrap a StatusOr (status.h).
#include "tensorpc/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace tensorpc {
namespace {

StatusOr<int> ok_int(int v) { return v; }
StatusOr<int> failed_int() { return not_found("no such int"); }

Status doubled_into(StatusOr<int> in, int* out) {
  TENSORPC_ASSIGN_OR_RETURN(const int v, std::move(in));
  *out = 2 * v;
  return Status();
}

TEST(AssignOrReturnTest, DeclaresTheValueWhenOk) {
  int out = 0;
  ASSERT_TRUE(doubled_into(ok_int(21), &out).ok());
  EXPECT_EQ(out, 42);
}

TEST(AssignOrReturnTest, ReturnsTheFailedStatusUnchangedAndAssignsNothing) {
  int out = 7;
  const Status s = doubled_into(failed_int(), &out);
  EXPECT_EQ(s.code(), StatusCode::not_found);
  EXPECT_EQ(s.message(), "no such int");
  EXPECT_EQ(out, 7);
}

TEST(AssignOrReturnTest, ReturnsTheStatusFromAFunctionReturningAnotherStatusOr) {
  const auto as_text = [](StatusOr<int> in) -> StatusOr<std::string> {
    TENSORPC_ASSIGN_OR_RETURN(const int v, std::move(in));
    return std::to_string(v);
  };
  EXPECT_EQ(as_text(ok_int(5)).value(), "5");
  EXPECT_EQ(as_text(failed_int()).status().code(), StatusCode::not_found);
}

TEST(AssignOrReturnTest, EvaluatesTheExpressionOnce) {
  int calls = 0;
  const auto counted = [&]() -> StatusOr<int> { return ++calls; };
  const auto run = [&]() -> Status {
    TENSORPC_ASSIGN_OR_RETURN(const int v, counted());
    EXPECT_EQ(v, 1);
    return Status();
  };
  ASSERT_TRUE(run().ok());
  EXPECT_EQ(calls, 1);
}

TEST(AssignOrReturnTest, MovesAMoveOnlyValueAndAssignsToAnExistingVariable) {
  std::unique_ptr<int> p;
  const auto run = [&]() -> Status {
    TENSORPC_ASSIGN_OR_RETURN(p, StatusOr<std::unique_ptr<int>>(std::make_unique<int>(3)));
    return Status();
  };
  ASSERT_TRUE(run().ok());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 3);
}

TEST(AssignOrReturnTest, TakesAnExpressionWithTopLevelCommasAndManyUsesInOneScope) {
  const auto sum = [](std::vector<int> v) -> StatusOr<int> { return v.at(0) + v.at(1); };
  const auto run = [&]() -> StatusOr<int> {
    TENSORPC_ASSIGN_OR_RETURN(const int a, sum({1, 2}));
    TENSORPC_ASSIGN_OR_RETURN(const int b, sum({3, 4}));
    return a + b;
  };
  EXPECT_EQ(run().value(), 10);
}

}  // namespace
}  // namespace tensorpc
