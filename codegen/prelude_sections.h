// The sections of the prelude (codegen/prelude.h), one file each; cuda_prelude() concatenates
// them in this order. Each is CUDA source valid for NVRTC (sm_70 and later) and for the host
// emulator (DC_HOST_EMULATION, codegen/emulator/dc_emu_runtime.h).
#pragma once

namespace dc::prelude_text {

// Macros that differ between the GPU and the emulator, activations, warp reductions.
extern const char* const kBase;
// dc_half / dc_bfloat16 storage types, conversions, f16x2/bf16x2 packing, cvt.rna.tf32.
extern const char* const kHalf;
// cp.async: the f32 forms and the byte-typed 16/8/4-byte copies.
extern const char* const kCpAsync;
// Tensor cores: fragment layouts, mma.sync and ldmatrix.
extern const char* const kMma;
// Volta's tensor cores: mma.sync m8n8k4 and its quad-pair fragment layouts (after kMma,
// whose emulator helpers it uses).
extern const char* const kMma884;

}  // namespace dc::prelude_text
