#include <gtest/gtest.h>
#include "ir/shape.h"
TEST(Shape, Broadcast) { EXPECT_EQ(dc::broadcast_shapes({2,1,3},{4,1}), (dc::Shape{2,4,3})); }
