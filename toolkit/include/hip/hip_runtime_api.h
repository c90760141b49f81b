// HIP on CUDA: the runtime API alone.
#pragma once
#include <hip/hip_runtime.h>
