// The prelude every generated source starts with: macros that differ between the GPU and
// the host emulator, and the device helpers templates share (activations, vector loads).
// On the host, the emulator's runtime header (codegen/emulator/) is prepended first and
// defines DC_HOST_EMULATION plus host versions of CUDA's built-ins.
#pragma once

#include <string>

namespace dc {

// The prelude text (valid for NVRTC of CUDA 12 and 13, and for the host emulator).
const std::string& cuda_prelude();

}  // namespace dc
