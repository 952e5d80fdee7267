// Probe (docs/estimator.md, "A work-group's dispatch"): PoCL's cost per work-group. The same
// work (N floats, 16 per work-item as 4 float4) launched with local sizes 16..1024, so only
// the number of work-groups changes; 15 rounds of every size in turn, 9 launches each.
//   gcc -O2 -o /tmp/pocl_group_dispatch scripts/probes/pocl_group_dispatch.c -lOpenCL
//   /tmp/pocl_group_dispatch 1048576; /tmp/pocl_group_dispatch 4194304
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
static const char* src =
"__kernel void k(__global const float4* a, __global float4* b) {\n"
"  size_t i = get_global_id(0) * 4;\n"
"  for (int e = 0; e < 4; ++e) { float4 v = a[i + e]; b[i + e] = max(v, 0.0f) * 2.0f; }\n"
"}\n";
static int cmp(const void* x, const void* y) { double a = *(double*)x, b = *(double*)y; return a < b ? -1 : a > b; }
int main(int argc, char** argv) {
  size_t N = argc > 1 ? atol(argv[1]) : (1 << 20);  // floats
  cl_platform_id pl; cl_device_id dev; cl_int err;
  clGetPlatformIDs(1, &pl, NULL); clGetDeviceIDs(pl, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, (cl_queue_properties[]){CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0}, &err);
  cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
  if (clBuildProgram(p, 1, &dev, "", NULL, NULL)) { puts("build failed"); return 1; }
  cl_kernel k = clCreateKernel(p, "k", &err);
  float* h = malloc(N * 4); for (size_t i = 0; i < N; ++i) h[i] = (float)(i % 7) - 3;
  cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, N * 4, h, &err);
  cl_mem b = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, N * 4, NULL, &err);
  clSetKernelArg(k, 0, sizeof a, &a); clSetKernelArg(k, 1, sizeof b, &b);
  size_t items = N / 16, locals[] = {16, 32, 64, 128, 256, 512, 1024};
  enum { L = 7, R = 15, S = 9 };
  double t[L][R * S];
  for (int r = 0; r < R; ++r)      // rounds: every local size once a round, so drift hits all alike
    for (int l = 0; l < L; ++l)
      for (int s = 0; s < S; ++s) {
        cl_event ev;
        clEnqueueNDRangeKernel(q, k, 1, NULL, &items, &locals[l], 0, NULL, &ev);
        clWaitForEvents(1, &ev);
        cl_ulong t0, t1;
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        t[l][r * S + s] = (t1 - t0) * 1e-3;
        clReleaseEvent(ev);
      }
  for (int l = 0; l < L; ++l) {
    qsort(t[l], R * S, sizeof(double), cmp);
    printf("local %4zu groups %7zu median_us %9.2f min_us %9.2f\n", locals[l], items / locals[l], t[l][R * S / 2], t[l][0]);
  }
  return 0;
}
