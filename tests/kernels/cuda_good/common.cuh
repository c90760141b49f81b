// Included by kernel.cu: proves a candidate may split its source over several files.
#pragma once
constexpr int kBlock = 256;
