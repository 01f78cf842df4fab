// How the forward-pass tests compare logits with the reference decoder's
// (reference_decoder.h): each within 1e-4 of the largest reference logit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/arch/reference_decoder.h"

namespace tensorpc::reference {

inline void expect_logits_close(const std::vector<float>& got, const Mat& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 * scale + 1e-5) << what << " logit " << i;
  }
}

}  // namespace tensorpc::reference
