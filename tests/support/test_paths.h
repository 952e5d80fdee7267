// Where a test finds the source tree, the built binaries and its fake CUDA driver: values of
// the build, defined in one generated file (test_paths.cpp, written by tests/CMakeLists.txt)
// rather than in every test's compile flags, so that a test source compiles to the same
// command in every checkout and ccache reuses its object across clones (CI's fresh clone).
// Force-included into the test targets that use them (dc_test_paths in tests/CMakeLists.txt).
#pragma once

namespace dc::testing::build_paths {
extern const char* const source_dir;      // the repository root
extern const char* const bin_dir;         // build/bin
extern const char* const fake_cuda;       // tests/support/fake_cuda.cpp's module
extern const char* const cuda_stubs_dir;  // the CUDA toolkit's stub libraries
}  // namespace dc::testing::build_paths

#define DC_SOURCE_DIR (::dc::testing::build_paths::source_dir)
#define DC_BIN_DIR (::dc::testing::build_paths::bin_dir)
#define DC_FAKE_CUDA (::dc::testing::build_paths::fake_cuda)
#define DC_CUDA_STUBS_DIR (::dc::testing::build_paths::cuda_stubs_dir)
