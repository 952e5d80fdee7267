# The benchmark scripts and the relocatable bundle, exercised without a GPU so that they do
# not rot between the sessions that have one: each script's CPU smoke mode (dc on emulated
# workers, PyTorch on the CPU) must finish with no FAILED cell; make_dist.sh must produce a
# bundle whose every library resolves inside it (it checks that itself) and that starts.
set(DC_BENCH_WORK ${CMAKE_BINARY_DIR}/bench-smoke)
add_test(NAME bench_templates_smoke COMMAND sh -c
  "/usr/bin/python3 '${PROJECT_SOURCE_DIR}/scripts/bench_templates.py' --device cpu --fresh \
   --runs 5 --min-seconds 0.1 --warmup-seconds 0.1 --dc-bin '${CMAKE_BINARY_DIR}/bin' \
   --work '${DC_BENCH_WORK}/templates' --out-md '${DC_BENCH_WORK}/templates.md' \
   && grep -q 'CPU SMOKE RUN' '${DC_BENCH_WORK}/templates.md' \
   && ! grep -q FAILED '${DC_BENCH_WORK}/templates.md'")
add_test(NAME bench_peers_smoke COMMAND sh -c
  "/usr/bin/python3 '${PROJECT_SOURCE_DIR}/scripts/bench_peers.py' --device cpu --fresh --batches 1 \
   --runs 5 --min-seconds 0.1 --warmup-seconds 0.1 --dc-bin '${CMAKE_BINARY_DIR}/bin' \
   --work '${DC_BENCH_WORK}/peers' --out-md '${DC_BENCH_WORK}/peers.md' \
   && grep -q 'CPU SMOKE RUN' '${DC_BENCH_WORK}/peers.md' \
   && ! grep -q FAILED '${DC_BENCH_WORK}/peers.md'")
# The same plumbing in fp16: PyTorch .half(), JAX in float16, dc's --precision fp16 plan.
add_test(NAME bench_peers_smoke_fp16 COMMAND sh -c
  "/usr/bin/python3 '${PROJECT_SOURCE_DIR}/scripts/bench_peers.py' --device cpu --fresh --batches 1 \
   --precision fp16 --models tiny_cnn --runners eager,jax,dc \
   --runs 5 --min-seconds 0.1 --warmup-seconds 0.1 --dc-bin '${CMAKE_BINARY_DIR}/bin' \
   --work '${DC_BENCH_WORK}/peers-fp16' --out-md '${DC_BENCH_WORK}/peers-fp16.md' \
   && grep -q 'CPU SMOKE RUN' '${DC_BENCH_WORK}/peers-fp16.md' \
   && grep -q 'everywhere: PyTorch on module.half' '${DC_BENCH_WORK}/peers-fp16.md' \
   && ! grep -q FAILED '${DC_BENCH_WORK}/peers-fp16.md'")
# The training step's peer benchmark (bench_peers.py --train): the tiny CNN's fp32 step,
# PyTorch eager on the CPU against dc's training plan tuned on emulated workers and run once
# on the host emulator (about 13 minutes here under load, most of it the tune); every cell
# ran (no FAILED, dc's step ran).
add_test(NAME bench_peers_train_smoke COMMAND sh -c
  "/usr/bin/python3 '${PROJECT_SOURCE_DIR}/scripts/bench_peers.py' --train --device cpu --fresh \
   --precisions fp32 --runs 5 --min-seconds 0.1 --warmup-seconds 0.1 --dc-bin '${CMAKE_BINARY_DIR}/bin' \
   --work '${DC_BENCH_WORK}/peers-train' --out-md '${DC_BENCH_WORK}/peers-train.md' \
   && grep -q 'CPU SMOKE RUN' '${DC_BENCH_WORK}/peers-train.md' \
   && ! grep -q FAILED '${DC_BENCH_WORK}/peers-train.md' \
   && grep -q 'ran (emulated step, not timed)' '${DC_BENCH_WORK}/peers-train.md'")
set_tests_properties(bench_peers_train_smoke PROPERTIES LABELS long TIMEOUT 1800)
# scripts/gpu_runbook.sh, the one-step-per-call driver of docs/bench/gpu-runbook.md: its
# templates step in CPU smoke mode leaves the table, log and archive in OUT; an unknown step
# is refused with status 2.
add_test(NAME gpu_runbook_smoke COMMAND sh -c
  "rm -rf '${DC_BENCH_WORK}/runbook' \
   && OUT='${DC_BENCH_WORK}/runbook' DC_RUNBOOK_DEVICE=cpu DC_BIN='${CMAKE_BINARY_DIR}/bin' \
      '${PROJECT_SOURCE_DIR}/scripts/gpu_runbook.sh' templates fp32 r50_3x3s2_128 \
   && grep -q 'CPU SMOKE RUN' '${DC_BENCH_WORK}/runbook/templates.md' \
   && ! grep -q FAILED '${DC_BENCH_WORK}/runbook/templates.md' \
   && grep -q 'gpu_runbook templates: exit 0' '${DC_BENCH_WORK}/runbook/templates.log' \
   && tar -tzf '${DC_BENCH_WORK}/runbook/templates.tar.gz' | grep -q . \
   && { '${PROJECT_SOURCE_DIR}/scripts/gpu_runbook.sh' bogus 2>/dev/null; test $? -eq 2; }")
# `all` in CPU smoke mode: every part within the step's limit, each part's table in OUT.
add_test(NAME gpu_runbook_all_smoke COMMAND sh -c
  "rm -rf '${DC_BENCH_WORK}/runbook-all' \
   && OUT='${DC_BENCH_WORK}/runbook-all' DC_RUNBOOK_DEVICE=cpu DC_BIN='${CMAKE_BINARY_DIR}/bin' DC_STEP_SECONDS=540 \
      '${PROJECT_SOURCE_DIR}/scripts/gpu_runbook.sh' all \
   && grep -q 'gpu_runbook all: exit 0' '${DC_BENCH_WORK}/runbook-all/all.log' \
   && test -s '${DC_BENCH_WORK}/runbook-all/check.md' && test -s '${DC_BENCH_WORK}/runbook-all/tune.md' \
   && grep -q 'CPU SMOKE RUN' '${DC_BENCH_WORK}/runbook-all/peers.md' \
   && tar -tzf '${DC_BENCH_WORK}/runbook-all/tune.tar.gz' | grep -q gpu.db")
set_tests_properties(bench_templates_smoke bench_peers_smoke bench_peers_smoke_fp16 gpu_runbook_smoke
                     gpu_runbook_all_smoke PROPERTIES LABELS long TIMEOUT 600)
# The bundle's dc_gpu_tests must exit 0 (every test passed or skipped for want of a device).
add_test(NAME make_dist_bundle COMMAND sh -c
  "'${PROJECT_SOURCE_DIR}/scripts/make_dist.sh' --no-build --with-tests '${CMAKE_BINARY_DIR}' '${DC_BENCH_WORK}/dist' \
   && env -i '${DC_BENCH_WORK}/dist/bin/dc-worker' --help | grep -q -- --connect \
   && { env -i DC_SOURCE_DIR='${PROJECT_SOURCE_DIR}' '${DC_BENCH_WORK}/dist/bin/dc_gpu_tests' --gtest_brief=1 \
        > '${DC_BENCH_WORK}/dist-gpu-tests.log' 2>&1 || { cat '${DC_BENCH_WORK}/dist-gpu-tests.log'; false; }; } \
   && env -i '${DC_BENCH_WORK}/dist/bin/dc-coordinator' --help >/dev/null \
   && test -f '${DC_BENCH_WORK}/dist/include/dc/dcrt.h'")
set_tests_properties(make_dist_bundle PROPERTIES LABELS unit TIMEOUT 120)
# scripts/bench_opencl.py's smoke mode: two small layers tuned for real on PoCL's CPU device
# against dc-bench-clblast, and the accuracy table from the tiny CNN (docs/opencl.md). Label
# long, not opencl: with PoCL's kernel cache cold (a fresh CI machine) its PoCL builds take
# about 7 minutes on 2 cores (70 s warm), and `ctest -L opencl` stays a few minutes.
add_test(NAME bench_opencl_smoke COMMAND sh -c
  "rm -rf '${DC_BENCH_WORK}/opencl' \
   && /usr/bin/python3 '${PROJECT_SOURCE_DIR}/scripts/bench_opencl.py' --smoke --dc-bin '${CMAKE_BINARY_DIR}/bin' \
      --work '${DC_BENCH_WORK}/opencl' \
   && grep -q 'CLBlast / dc' '${DC_BENCH_WORK}/opencl/opencl.md' \
   && ! grep -q 'failed:' '${DC_BENCH_WORK}/opencl/opencl.md' \
   && grep -q 'median Spearman' '${DC_BENCH_WORK}/opencl/estimator-accuracy.md'")
set_tests_properties(bench_opencl_smoke PROPERTIES LABELS long TIMEOUT 900)
