# Tests that drive the built commands. Labels:
#   unit         fast (seconds)
#   conformance  ONNX's own backend node tests (Debian's libonnx-testdata, all 932)
#   long         exported ResNet-50, MobileNetV2, BERT-base (export takes minutes)
set(DC_COORD $<TARGET_FILE:dc-coordinator>)
set(DC_PY /usr/bin/python3)
set(EX ${PROJECT_SOURCE_DIR}/examples)

add_test(NAME cli_help COMMAND ${DC_COORD} --help)
set_tests_properties(cli_help PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION "inspect.*verify")

foreach(example tiny_cnn tiny_transformer)
  add_test(NAME cli_verify_${example}
    COMMAND ${DC_COORD} verify ${EX}/${example}/model.onnx --data ${EX}/${example}/test_data_set_0)
  add_test(NAME cli_verify_${example}_unsimplified
    COMMAND ${DC_COORD} verify ${EX}/${example}/model.onnx --data ${EX}/${example}/test_data_set_0 --no-simplify)
  add_test(NAME cli_inspect_${example} COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_inspect.py
    ${DC_COORD} ${EX}/${example}/model.onnx)
  set_tests_properties(cli_verify_${example} cli_verify_${example}_unsimplified cli_inspect_${example}
    PROPERTIES LABELS unit)
endforeach()

add_test(NAME cli_plan_tiny_cnn COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan.py
  ${DC_COORD} ${EX}/tiny_cnn/model.onnx h100,t4 conv+relu conv+add+relu)
add_test(NAME cli_plan_tiny_transformer COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan.py
  ${DC_COORD} ${EX}/tiny_transformer/model.onnx a100,l4 matmul+add+gelu)
set_tests_properties(cli_plan_tiny_cnn cli_plan_tiny_transformer PROPERTIES LABELS unit)

add_test(NAME cli_keygen COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_keygen.sh ${DC_COORD})
set_tests_properties(cli_keygen PROPERTIES LABELS unit)

add_test(NAME cli_import_errors COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_bad_models.py
  ${DC_COORD} ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_import_errors PROPERTIES LABELS unit)

add_test(NAME cli_import_opsets COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_opsets.py
  ${DC_COORD} ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_import_opsets PROPERTIES LABELS unit)

# All of ONNX 1.12's backend node tests (Debian's libonnx-testdata), two at a time: ~70 s.
add_test(NAME onnx_node_conformance COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/run_node_tests.py
  ${DC_COORD} /usr/share/libonnx-testdata/data/node
  ${CMAKE_CURRENT_SOURCE_DIR}/cli/node_tests_unsupported.txt --jobs 2)
set_tests_properties(onnx_node_conformance PROPERTIES LABELS conformance TIMEOUT 900)

# Exported models: one fixture exports all three (skipped per model when already there).
set(DC_MODELS ${PROJECT_SOURCE_DIR}/models)
add_test(NAME export_models COMMAND ${DC_PY} ${PROJECT_SOURCE_DIR}/scripts/export_models.py ${DC_MODELS})
set_tests_properties(export_models PROPERTIES LABELS long FIXTURES_SETUP exported_models TIMEOUT 1500
  RESOURCE_LOCK exported_models_dir)
foreach(model resnet50 mobilenetv2 bert_base)
  add_test(NAME verify_${model}
    COMMAND ${DC_COORD} verify ${DC_MODELS}/${model}/model.onnx --data ${DC_MODELS}/${model}/test_data_set_0
      --rtol 1e-4)
  set_tests_properties(verify_${model} PROPERTIES LABELS long FIXTURES_REQUIRED exported_models
    PASS_REGULAR_EXPRESSION "verify: PASS" TIMEOUT 600)
endforeach()
add_test(NAME plan_resnet50 COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan.py
  ${DC_COORD} ${DC_MODELS}/resnet50/model.onnx h100,a100 conv+relu conv+add+relu)
add_test(NAME plan_mobilenetv2 COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan.py
  ${DC_COORD} ${DC_MODELS}/mobilenetv2/model.onnx t4,l4 conv+clip conv+add)
add_test(NAME plan_bert_base COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan.py
  ${DC_COORD} ${DC_MODELS}/bert_base/model.onnx h100,a10 matmul+add+gelu add+layernorm transpose+matmul+div+add+softmax+matmul)
set_tests_properties(plan_resnet50 plan_mobilenetv2 plan_bert_base PROPERTIES LABELS long
  FIXTURES_REQUIRED exported_models TIMEOUT 600)
# Views are not kernels (issue 14): no step of the estimate-only plan only moves data. The
# Reshape/Transpose chains around BERT's attention are operand cones of the fused attention
# kernel (its index maps, issue 26), so they are neither steps nor views: at most 7 kernels a
# layer (9 before issue 26), 87 in all with the embedding and pooler.
# tests/cli/check_plan_no_copies.py.
add_test(NAME plan_no_copies_bert_base COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan_no_copies.py
  ${DC_COORD} ${DC_MODELS}/bert_base/model.onnx a100 --max-steps 87)
set_tests_properties(plan_no_copies_bert_base PROPERTIES LABELS long FIXTURES_REQUIRED exported_models
  TIMEOUT 600)
add_test(NAME cli_plan_no_copies_tiny_transformer COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan_no_copies.py
  ${DC_COORD} ${EX}/tiny_transformer/model.onnx a100)
set_tests_properties(cli_plan_no_copies_tiny_transformer PROPERTIES LABELS unit TIMEOUT 300)

# Issue 26: transformers in the exporters' node forms (scripts/make_transformer_models.py):
# verify against a numpy oracle and at most 7 kernels, one attention kernel and no copy-only
# step per layer (counts, seconds); every chosen kernel on the host emulator in fp32 and fp16
# (run, about 2 minutes). tests/cli/check_fusion_models.py.
add_test(NAME cli_fusion_models_counts COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_fusion_models.py
  counts ${DC_COORD} $<TARGET_FILE:dc-run> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_fusion_models_counts PROPERTIES LABELS unit TIMEOUT 300)
add_test(NAME cli_fusion_models_run COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_fusion_models.py
  run ${DC_COORD} $<TARGET_FILE:dc-run> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_fusion_models_run PROPERTIES LABELS long TIMEOUT 1200)

# Issue 26, whole models: BERT, GPT-2, LLaMA (GQA), Mistral (sliding window), T5 and BART from
# transformers, exported by torch 2.15's default exporter (opset 20) and cached in
# tests/data/hf_torch2 (scripts/export_hf_models.py, in the venv of scripts/make_torch2_venv.sh;
# no torch needed here; Mistral and T5 also with dynamic sequence axes, planned with --shape).
# counts: `verify` and the per-layer kernels, views, attention kernels
# and copy-only steps of the fp16 h100 plans, asserted (about 15 s); run: `dc-run --emulate
# --data` of each fp32 and fp16 plan (about 2 minutes); tune: an emulated quick tune of each, then
# `dc-run --emulate --data` on the tuned plan (3 to 6 minutes). tests/cli/check_hf_torch2_models.py.
add_test(NAME cli_hf_torch2_models_counts COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_hf_torch2_models.py
  counts ${DC_COORD} $<TARGET_FILE:dc-run> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_hf_torch2_models_counts PROPERTIES LABELS unit TIMEOUT 300)
add_test(NAME cli_hf_torch2_models_run COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_hf_torch2_models.py
  run ${DC_COORD} $<TARGET_FILE:dc-run> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_hf_torch2_models_run PROPERTIES LABELS long TIMEOUT 1200)
add_test(NAME cli_hf_torch2_models_tune COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_hf_torch2_models.py
  tune ${DC_COORD} $<TARGET_FILE:dc-run> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_hf_torch2_models_tune PROPERTIES LABELS long TIMEOUT 1800)

# Issue 17: a decoder with 2.6 GB of external data imports, plans and writes a plan with a
# peak RSS under a quarter of its weights (tests/cli/check_scale.py; about 1 minute).
add_test(NAME scale_external_data COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_scale.py
  ${DC_COORD} ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
# The same with --precision fp16 on a 6-layer decoder (1.3 GB, about 50 s): weights converted chunk by
# chunk as weights.bin is written, peak RSS under a quarter of the fp32 weights.
add_test(NAME scale_external_data_fp16 COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_scale.py
  ${DC_COORD} ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR} fp16)
set_tests_properties(scale_external_data scale_external_data_fp16 PROPERTIES LABELS long TIMEOUT 600)

# tune end to end with emulated workers (tests/cli/check_tune.py): a cold tune, the same
# command again (nothing measured), and a run SIGKILLed mid-way then resumed, on the local
# farm of dc-worker processes (NVRTC compiles: about a minute on 2 cores).
add_test(NAME cli_tune_tiny_cnn_emulated COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_tune.py
  ${DC_COORD} ${EX}/tiny_cnn/model.onnx ${EX}/tune-quick.yaml h100 --local-workers 2 --emulate)
set_tests_properties(cli_tune_tiny_cnn_emulated PROPERTIES LABELS unit TIMEOUT 300)
# The in-process farm is no user's farm: tune has no flag for it (exit 2, one error line).
add_test(NAME cli_tune_refuses_inprocess_farm COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_failure.py
  2 "^error: .*farm" --
  ${DC_COORD} tune ${EX}/tiny_cnn/model.onnx --gpus h100 --emulate --farm inprocess --db :memory:)
set_tests_properties(cli_tune_refuses_inprocess_farm PROPERTIES LABELS unit)
# A planted internal error (the emulated worker's test fault, docs/farm.md: every reference
# kernel job, one per workload) makes tune exit 1 and say how many jobs and workloads.
add_test(NAME cli_tune_planted_internal_error COMMAND ${CMAKE_COMMAND} -E env DC_TEST_INTERNAL_ERROR=reference/
  ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_failure.py
  1 "^error: [0-9]+ jobs of [0-9]+ workloads ended in internal_error" --
  ${DC_COORD} tune ${EX}/tiny_cnn/model.onnx --gpus h100 --emulate --local-workers 1 --db :memory:
  --config ${EX}/tune-quick.yaml --no-check --quiet)
set_tests_properties(cli_tune_planted_internal_error PROPERTIES LABELS unit TIMEOUT 600)
add_test(NAME cli_tune_needs_gpus COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_failure.py
  2 "^error: tune needs --gpus LIST" -- ${DC_COORD} tune ${EX}/tiny_cnn/model.onnx --db :memory:)
set_tests_properties(cli_tune_needs_gpus PROPERTIES LABELS unit)

# Every kept variant (and the reference kernel) of each exported model compiles with NVRTC.
# The five architectures are spread over the three models so that the suite stays within
# CI's time; docs/bench/compile-all.md explains the split.
foreach(pair "resnet50:t4,a100" "mobilenetv2:a10" "bert_base:l4,h100")
  string(REPLACE ":" ";" parts ${pair})
  list(GET parts 0 model)
  list(GET parts 1 gpus)
  add_test(NAME compile_kept_${model}
    COMMAND ${DC_COORD} codegen ${DC_MODELS}/${model}/model.onnx --gpus ${gpus} --top 0
      --out ${CMAKE_BINARY_DIR}/codegen-${model})
  set_tests_properties(compile_kept_${model} PROPERTIES LABELS "long;compile_kept"
    FIXTURES_REQUIRED exported_models TIMEOUT 2400 PASS_REGULAR_EXPRESSION "\\(0 failed to compile\\)")
endforeach()

# sm_70 (V100) compiles with NVRTC 12 (pip's nvidia-cuda-nvrtc-cu12, scripts/install-deps.sh)
# beside the toolkit's NVRTC 13 (docs/compilation.md, "Which NVRTC"): a short sample in the
# unit label (the examples' best two kept fp16 and fp32 variants per workload, Volta's
# m8n8k4 among them), and every kept fp32 and fp16 variant of the three exported models under
# the label compile_kept_sm70 (docs/bench/compile-all.md; left out of scripts/test.sh's
# default run with compile_kept).
foreach(example tiny_cnn tiny_transformer)
  add_test(NAME compile_sm70_${example}
    COMMAND ${DC_COORD} codegen ${EX}/${example}/model.onnx --gpus v100 --top 2 --precision fp16
      --out ${CMAKE_BINARY_DIR}/codegen-sm70-${example})
  set_tests_properties(compile_sm70_${example} PROPERTIES LABELS unit TIMEOUT 600
    PASS_REGULAR_EXPRESSION "\\(0 failed to compile\\)")
endforeach()
foreach(model resnet50 mobilenetv2 bert_base)
  foreach(precision fp32 fp16)
    add_test(NAME compile_kept_sm70_${model}_${precision}
      COMMAND ${DC_COORD} codegen ${DC_MODELS}/${model}/model.onnx --gpus v100 --top 0
        --precision ${precision} --out ${CMAKE_BINARY_DIR}/codegen-sm70-${model}-${precision})
    set_tests_properties(compile_kept_sm70_${model}_${precision} PROPERTIES LABELS compile_kept_sm70
      FIXTURES_REQUIRED exported_models TIMEOUT 7200 PASS_REGULAR_EXPRESSION "\\(0 failed to compile\\)")
  endforeach()
endforeach()

# Tuned plans end to end (tests/cli/check_plan_run.py): tune --emulate --out writes the plan,
# dc-run --emulate --data runs it on the host emulator and checks it against the test data
# (PyTorch's outputs for the exported models); damaged plans are refused. The exported
# models carry the label "plan" too (ctest -L plan).
set(DC_RUN $<TARGET_FILE:dc-run>)
foreach(example tiny_cnn tiny_transformer)
  add_test(NAME cli_plan_run_${example} COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan_run.py
    ${DC_COORD} ${DC_RUN} ${EX}/${example}/model.onnx ${EX}/${example}/test_data_set_0
    ${EX}/tune-quick.yaml h100 --local-workers 2)
  set_tests_properties(cli_plan_run_${example} PROPERTIES LABELS unit TIMEOUT 600)
endforeach()
# The same on a real device (issue 30): the tiny models tuned on PoCL's OpenCL CPU device (real
# compiles and timings, plan marked measured, the DB's rows real, a second tune measuring
# nothing) and the plans run by dc-run against the test data, with --bench times.
# The tiny transformer keeps two variants a workload (tests/cli/tune-pocl-model.yaml): with
# four, its PoCL tune takes over 8 minutes on 2 cores.
foreach(pair "tiny_cnn:${EX}/tune-quick.yaml" "tiny_transformer:${CMAKE_CURRENT_SOURCE_DIR}/cli/tune-pocl-model.yaml")
  string(REPLACE ":" ";" pair "${pair}")
  list(GET pair 0 example)
  list(GET pair 1 config)
  add_test(NAME cli_plan_run_opencl_${example} COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan_run.py
    ${DC_COORD} ${DC_RUN} ${EX}/${example}/model.onnx ${EX}/${example}/test_data_set_0
    ${config} pocl-cpu --real --local-workers 1)
  # RUN_SERIAL: it times kernels for real on the host's cores (PoCL), and another test
  # taking them for the length of the tune is a real drift that the tune's drift check reports.
  set_tests_properties(cli_plan_run_opencl_${example} PROPERTIES LABELS opencl TIMEOUT 900 RUN_SERIAL TRUE)
endforeach()
# MobileNetV2 on PoCL, at the path issue 30 spells (models/mobilenet_v2: a link to
# models/mobilenetv2 that export_models.py makes), exported first where it is missing. Two
# variants a workload (tests/cli/tune-pocl-model.yaml) keep it to a few minutes in CI; the
# default tune of the same command measures eight (docs/opencl.md).
add_test(NAME export_mobilenet_v2 COMMAND ${DC_PY} ${PROJECT_SOURCE_DIR}/scripts/export_models.py ${DC_MODELS}
  --models mobilenet_v2)
set_tests_properties(export_mobilenet_v2 PROPERTIES LABELS opencl FIXTURES_SETUP mobilenet_v2_model
  RESOURCE_LOCK exported_models_dir TIMEOUT 900)
add_test(NAME plan_run_opencl_mobilenet_v2 COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan_run.py
  ${DC_COORD} ${DC_RUN} ${DC_MODELS}/mobilenet_v2/model.onnx ${DC_MODELS}/mobilenet_v2/test_data_set_0
  ${CMAKE_CURRENT_SOURCE_DIR}/cli/tune-pocl-model.yaml pocl-cpu --real --local-workers 1)
# With the drift check: its sentinel is a workload whose floor is at least 10 us (docs/tune.md,
# "Drift over a tune"), not the 4 us kernel whose launch jitter once read x1.30.
set_tests_properties(plan_run_opencl_mobilenet_v2 PROPERTIES LABELS opencl FIXTURES_REQUIRED mobilenet_v2_model
  TIMEOUT 1500 RUN_SERIAL TRUE)
# The ops of issue 14 (examples/tiny_ops, scripts/make_ops_example.py) end to end: about
# 2 minutes of emulated tuning, so label long.
add_test(NAME cli_plan_run_tiny_ops COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan_run.py
  ${DC_COORD} ${DC_RUN} ${EX}/tiny_ops/model.onnx ${EX}/tiny_ops/test_data_set_0
  ${EX}/tune-quick.yaml h100 --local-workers 2)
set_tests_properties(cli_plan_run_tiny_ops PROPERTIES LABELS long TIMEOUT 1200)
add_test(NAME cli_plan_run_tiny_index COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan_run.py
  ${DC_COORD} ${DC_RUN} ${EX}/tiny_index/model.onnx ${EX}/tiny_index/test_data_set_0
  ${EX}/tune-quick.yaml h100 --local-workers 2)
set_tests_properties(cli_plan_run_tiny_index PROPERTIES LABELS long TIMEOUT 1200)
foreach(model resnet50 mobilenetv2 bert_base)
  add_test(NAME plan_run_${model} COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan_run.py
    ${DC_COORD} ${DC_RUN} ${DC_MODELS}/${model}/model.onnx ${DC_MODELS}/${model}/test_data_set_0
    ${EX}/tune-quick.yaml a100 --local-workers 2)
  set_tests_properties(plan_run_${model} PROPERTIES LABELS "long;plan" FIXTURES_REQUIRED exported_models
    TIMEOUT 1800)
endforeach()

# Reduced-precision plans end to end (issue 12, tests/cli/check_precision_run.py): tune
# --precision fp16|bf16 --emulate --out, dc-run --emulate --data within the precision's
# whole-model tolerance of the fp32 test data; weights.bin about half.
foreach(precision fp16 bf16)
  foreach(example tiny_cnn tiny_transformer)
    add_test(NAME cli_precision_run_${example}_${precision} COMMAND ${DC_PY}
      ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_precision_run.py ${DC_COORD} ${DC_RUN}
      ${EX}/${example}/model.onnx ${EX}/${example}/test_data_set_0 ${EX}/tune-quick.yaml h100
      ${precision} --local-workers 2)
    set_tests_properties(cli_precision_run_${example}_${precision} PROPERTIES LABELS "unit;plan" TIMEOUT 900)
  endforeach()
  foreach(model resnet50 mobilenetv2 bert_base)
    add_test(NAME precision_run_${model}_${precision} COMMAND ${DC_PY}
      ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_precision_run.py ${DC_COORD} ${DC_RUN}
      ${DC_MODELS}/${model}/model.onnx ${DC_MODELS}/${model}/test_data_set_0 ${EX}/tune-quick.yaml
      h100 ${precision} --local-workers 2)
    set_tests_properties(precision_run_${model}_${precision} PROPERTIES LABELS "long;plan"
      FIXTURES_REQUIRED exported_models TIMEOUT 3000)
  endforeach()
endforeach()
# One tune for a V100 and an A100 from one build (issue 29, tests/cli/check_multi_gpu_run.py):
# v100 compiled by NVRTC 12, a100 by NVRTC 13, both plans run by dc-run --emulate --data;
# fp16 through Volta's m8n8k4 and Ampere's m16n8k16. The tiny CNN (fp16 in unit), the design
# card's ResNet-50 in long.
foreach(precision fp32 fp16)
  add_test(NAME cli_multi_gpu_run_tiny_cnn_${precision} COMMAND ${DC_PY}
    ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_multi_gpu_run.py ${DC_COORD} ${DC_RUN}
    ${EX}/tiny_cnn/model.onnx ${EX}/tiny_cnn/test_data_set_0 ${EX}/tune-quick.yaml ${precision}
    --local-workers 2)
  # fp16 (both tensor-core instructions) in unit, fp32 in long: CI's time.
  if(precision STREQUAL fp16)
    set(label unit)
  else()
    set(label long)
  endif()
  set_tests_properties(cli_multi_gpu_run_tiny_cnn_${precision} PROPERTIES LABELS "${label};plan" TIMEOUT 1200)
  add_test(NAME multi_gpu_run_resnet50_${precision} COMMAND ${DC_PY}
    ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_multi_gpu_run.py ${DC_COORD} ${DC_RUN}
    ${DC_MODELS}/resnet50/model.onnx ${DC_MODELS}/resnet50/test_data_set_0 ${EX}/tune-quick.yaml
    ${precision} --local-workers 2)
  # tune_long: a whole ResNet-50 tune for two GPU types, ~10 min on 2 cores even when idle;
  # scripts/test.sh runs it on request (`scripts/test.sh -L tune_long`), not in CI's run.
  set_tests_properties(multi_gpu_run_resnet50_${precision} PROPERTIES LABELS "tune_long;plan"
    FIXTURES_REQUIRED exported_models TIMEOUT 3600)
endforeach()
# Issue 11's acceptance spelling: the deprecated --precisions fp16 on an exported model.
# Issue 11's acceptance: with --precisions fp16 every chosen Conv/MatMul/Gemm cluster of the
# three models has a tensor-core variant as its best estimate (tests/cli/check_plan_tensor_cores.py).
foreach(m resnet50 mobilenetv2 bert_base)
  add_test(NAME plan_${m}_precisions_fp16 COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_plan_tensor_cores.py
    ${DC_COORD} ${DC_MODELS}/${m}/model.onnx h100 fp16)
  set_tests_properties(plan_${m}_precisions_fp16 PROPERTIES LABELS long FIXTURES_REQUIRED exported_models TIMEOUT 600)
endforeach()

# Reuse across models (issue 6): ResNet-101 tuned after ResNet-50 in the same DB measures only
# the workloads ResNet-50 did not have (none: it only repeats its blocks more often).
# tests/cli/check_reuse_models.py, with emulated local workers.
add_test(NAME export_resnet101 COMMAND ${DC_PY} ${PROJECT_SOURCE_DIR}/scripts/export_models.py ${DC_MODELS}
  --models resnet101)
set_tests_properties(export_resnet101 PROPERTIES LABELS long FIXTURES_SETUP resnet101_model TIMEOUT 900)
add_test(NAME reuse_resnet50_then_resnet101 COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_reuse_models.py
  ${DC_COORD} ${DC_MODELS}/resnet50/model.onnx ${DC_MODELS}/resnet101/model.onnx ${EX}/tune-quick.yaml h100
  --emulate --local-workers 2)
set_tests_properties(reuse_resnet50_then_resnet101 PROPERTIES LABELS long
  FIXTURES_REQUIRED "exported_models;resnet101_model" TIMEOUT 600)

# dc-worker --list-devices: what the worker would serve, then exit (emulated: deterministic),
# with the NVRTC of each device (a v100 compiles with NVRTC 12, the others with 13).
add_test(NAME cli_worker_list_devices_emulated COMMAND $<TARGET_FILE:dc-worker> --list-devices
  --emulate h100 --emulate t4 --emulate v100)
set_tests_properties(cli_worker_list_devices_emulated PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "0: h100 \\(emulated, sm_90, NVRTC 13\\.[0-9]+\\)\n1: t4 \\(emulated, sm_75, NVRTC 13\\.[0-9]+\\)\n2: v100 \\(emulated, sm_70, NVRTC 12\\.[0-9]+\\)")
# An unknown GPU type is bad user input: exit 2 and one line that names it and the known
# types (not just "non-zero": a crash would pass that).
add_test(NAME cli_worker_list_devices_unknown_type COMMAND ${DC_PY}
  ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_failure.py 2 "unknown GPU 'nosuchgpu'; known: .*h100" --
  $<TARGET_FILE:dc-worker> --list-devices --emulate nosuchgpu)
set_tests_properties(cli_worker_list_devices_unknown_type PROPERTIES LABELS unit)

# --precision: plans per precision, the deprecated --precisions, bad combinations.
add_test(NAME cli_precision COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_precision.py
  ${DC_COORD} ${EX}/tiny_transformer/model.onnx)
set_tests_properties(cli_precision PROPERTIES LABELS unit)

# Disk and database faults (issue 15, tests/cli/check_db_faults.py; label faults): the tuning
# DB on a full tmpfs, a DB locked by another writer (busy timeout --db-timeout), two tunes
# on one DB at once, plan --out / tune --out on a full disk. The tmpfs cases need root
# (CI runs as root) and are skipped elsewhere. Each runs tunes of ~20 emulated jobs:
# 15-80 s on 2 cores, so label long.
foreach(case disk_full locked two_tunes plan_full)
  add_test(NAME db_faults_${case} COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_db_faults.py
    ${case} ${DC_COORD} ${EX}/tiny_cnn/model.onnx h100)
  set_tests_properties(db_faults_${case} PROPERTIES LABELS "long;faults" TIMEOUT 600 SKIP_RETURN_CODE 77)
endforeach()

# The farm as a shared service (issue 28, tests/service/check_farm_service.py): `serve` with
# four emulated dc-workers, three tunes at once (fair share, identical jobs measured once,
# one DB row each), status, and a client SIGKILLed mid-tune then rerun. Real NVRTC compiles
# on loopback: minutes on 2 cores, so label long.
add_test(NAME farm_service_three_tunes COMMAND ${DC_PY} ${PROJECT_SOURCE_DIR}/tests/service/check_farm_service.py
  ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${PROJECT_SOURCE_DIR})
set_tests_properties(farm_service_three_tunes PROPERTIES LABELS long TIMEOUT 1800 RUN_SERIAL TRUE)
# serve --metrics (tests/service/check_metrics.py): /metrics parsed with prometheus_client's
# parser, its counters against the DB, bad HTTP requests, the status page in headless
# Chromium (DOM and screenshot), with two emulated workers and two small tunes. About a
# minute on 2 cores (real NVRTC compiles): label long.
add_test(NAME farm_service_metrics COMMAND ${DC_PY} ${PROJECT_SOURCE_DIR}/tests/service/check_metrics.py
  ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${PROJECT_SOURCE_DIR})
set_tests_properties(farm_service_metrics PROPERTIES LABELS long TIMEOUT 900 RUN_SERIAL TRUE)
# The service SIGKILLed and restarted mid-tune (tests/service/check_farm_restart.py): workers
# rejoin, the tune reconnects and resubmits, nothing recorded twice. Minutes: label long.
add_test(NAME farm_service_restart COMMAND ${DC_PY} ${PROJECT_SOURCE_DIR}/tests/service/check_farm_restart.py
  ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${PROJECT_SOURCE_DIR})
set_tests_properties(farm_service_restart PROPERTIES LABELS long TIMEOUT 1200 RUN_SERIAL TRUE)
# The farm service benchmark's smoke run (scripts/bench_farm_service.py --smoke;
# docs/bench/farm-service.md): `serve`, bench_farm's zero-time workers and three tunes of 400
# synthetic jobs, then a 7 s soak with tunes coming and going and two tunes SIGKILLed: every
# job answered once, a fairness figure, the killed tunes' queues cancelled, no tune left.
# About 15 s on the loaded 2-core VM.
add_test(NAME farm_service_bench_smoke COMMAND ${DC_PY} ${PROJECT_SOURCE_DIR}/scripts/bench_farm_service.py
  --smoke --bin ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
set_tests_properties(farm_service_bench_smoke PROPERTIES LABELS unit TIMEOUT 180 RUN_SERIAL TRUE)

# Training plans end to end (issue 27, tests/cli/check_train_plans.py): tune --train of the
# tiny CNN on emulated workers (top-k 1: about a minute), dc-run --train --emulate of the
# tuned plan against verify --train's losses, --save-weights loaded by onnxruntime.
add_test(NAME cli_train_tune_run COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_train_plans.py
  ${DC_COORD} ${DC_RUN} ${EX}/tiny_cnn/model.onnx --recompute --local-workers 2 --top-k 1)
set_tests_properties(cli_train_tune_run PROPERTIES LABELS unit TIMEOUT 900)
# The same training step on a real device: the tiny CNN's training plan for PoCL's OpenCL CPU
# device, one step by dc-run (OpenCL backend, state carried by SVM copies) against verify --train.
add_test(NAME cli_train_run_opencl_tiny_cnn COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_train_plans.py
  ${DC_COORD} ${DC_RUN} ${EX}/tiny_cnn/model.onnx --recompute --opencl)
set_tests_properties(cli_train_run_opencl_tiny_cnn PROPERTIES LABELS opencl TIMEOUT 900)
# Mixed-precision training (tests/cli/check_train_amp.py): plan --train --precision
# fp32/fp16/bf16 of the tiny CNN, dc-run --train --emulate --steps 3 each: bf16 losses within
# the AMP step bound of fp32's, fp16's first step skipped by the loss scaler (about 90 s).
add_test(NAME cli_train_amp COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_train_amp.py
  ${DC_COORD} ${DC_RUN} ${EX}/tiny_cnn/model.onnx)
set_tests_properties(cli_train_amp PROPERTIES LABELS unit TIMEOUT 900)
# A TF32 training step (tests/cli/check_train_tf32.py): the tiny transformer's plan --train
# --precision tf32 runs its fused attention forward (writing the log-sum-exp) on TF32 tensor
# cores; dc-run --train --emulate --steps 3 follows the fp32 plan's losses (about 15 s).
add_test(NAME cli_train_tf32 COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_train_tf32.py
  ${DC_COORD} ${DC_RUN} ${EX}/tiny_transformer/model.onnx)
set_tests_properties(cli_train_tf32 PROPERTIES LABELS unit TIMEOUT 600)
