# Training steps against PyTorch autograd (tests/training/check_train_torch.py, torch 1.13 at
# /usr/bin/python3; docs/training.md "Tests"). Labels: unit (small models, seconds each),
# training (the issue's ResNet-18 and MobileNetV2, a minute or two each; in CI).
set(DC_TRAIN_CHECK /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_train_torch.py $<TARGET_FILE:dc-coordinator>)
# The step cases run twice: on the CPU reference (verify --train) and as the plan's device
# kernels on the host emulator (plan --train --out, dc-run --train --emulate --save-weights).
set(DC_TRAIN_CHECK_DEVICE /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_train_torch.py --dc-run $<TARGET_FILE:dc-run>
    $<TARGET_FILE:dc-coordinator>)
add_test(NAME train_torch_small COMMAND ${DC_TRAIN_CHECK_DEVICE} steps:mlp steps:small_cnn steps:tiny_cnn steps:tiny_unet)
add_test(NAME train_torch_transformers COMMAND ${DC_TRAIN_CHECK_DEVICE} steps:tiny_transformer steps:small_bert steps:bert4)
# GroupNorm and InstanceNorm (torch exports both as InstanceNormalization), trained through
# lower_norms's LayerNormalization and per-channel affine.
add_test(NAME train_torch_norms COMMAND ${DC_TRAIN_CHECK_DEVICE} steps:norms_cnn)
add_test(NAME train_torch_curve COMMAND ${DC_TRAIN_CHECK} curve)
add_test(NAME train_torch_errors COMMAND ${DC_TRAIN_CHECK} errors cli)
# bf16 mixed precision against PyTorch's CPU autocast (docs/precision.md "Mixed-precision
# training"): verify --train --precision bf16 and the emulated bf16 plan. The two encoders run
# their attention fused (dc.Attention on bf16 tensor cores writing an f32 log-sum-exp,
# dc.AttentionGrad on attention_backward with bf16 operands).
add_test(NAME train_torch_amp COMMAND ${DC_TRAIN_CHECK_DEVICE} amp:mlp amp:small_cnn amp:tiny_cnn amp:small_bert amp:bert4)
set_tests_properties(train_torch_small train_torch_transformers train_torch_norms train_torch_curve train_torch_errors train_torch_amp
  PROPERTIES LABELS unit TIMEOUT 600)
# dc keeps no more bytes for the backward pass than PyTorch eager saves (compare_memory_torch.py,
# docs/bench/training.md): byte counts of plan.json's memory report against saved-tensor hooks.
add_test(NAME train_memory_torch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/compare_memory_torch.py
    $<TARGET_FILE:dc-coordinator> --check tiny_cnn small_cnn mlp small_bert)
set_tests_properties(train_memory_torch PROPERTIES LABELS unit TIMEOUT 300)
add_test(NAME train_torch_resnet18 COMMAND ${DC_TRAIN_CHECK_DEVICE} steps:resnet18)
set_tests_properties(train_torch_resnet18 PROPERTIES LABELS training TIMEOUT 1500)
# torchvision's MobileNetV2 (10 classes, 64x64, batch 4; depthwise convolutions, ReLU6 as
# Clip) on the CPU reference: about 2.5 minutes here (the AdamW bound is wide: PyTorch's own
# fp32 steps are far from its fp64 ones on this model; docs/training.md "Tests").
add_test(NAME train_torch_mobilenetv2 COMMAND ${DC_TRAIN_CHECK} steps:mobilenetv2)
set_tests_properties(train_torch_mobilenetv2 PROPERTIES LABELS training TIMEOUT 1500)

# The training unit tests on their own, built only on request (a quick loop while working on
# training; CI runs them inside dc_unit_tests, label unit).
file(GLOB DC_TRAINING_TEST_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_LIST_DIR}/../unit/test_gradients_*.cpp ${CMAKE_CURRENT_LIST_DIR}/../unit/test_training_*.cpp)
add_executable(dc_training_tests EXCLUDE_FROM_ALL ${DC_TRAINING_TEST_SOURCES})
target_include_directories(dc_training_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../support)
target_link_libraries(dc_training_tests PRIVATE dc_common dc_warnings GTest::gtest GTest::gtest_main)

# The issue's whole-model training runs (label long, not in CI: about an hour each here):
# tune --train on emulated workers, then dc-run --train --emulate --steps 2 of the tuned plan
# against verify --train's losses, and --save-weights loaded by onnxruntime
# (tests/cli/check_train_plans.py). ResNet-50 at batch 8 with cross-entropy and SGD with
# momentum; BERT-base at sequence 128, batch 2, with mse on its hidden states (its labels
# are a seeded float target; the token ids come from the export's test_data_set_0). The
# deadlines are wide: emulating one of batch 8's convolutions outlasts the default 30 s run
# deadline on the loaded 2-core machine, and a timed-out winner is replaced by the next.
# ResNet-50's second loss after an SGD step of lr 0.1 moves by 2 % when its input moves by one
# ulp: its bound is measured in the run (--ulp-bound, docs/training.md "Whole-model runs").
set(DC_TRAIN_MODELS ${PROJECT_SOURCE_DIR}/models/train)
add_test(NAME export_train_models COMMAND sh -c
  "/usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/export_models.py ${DC_TRAIN_MODELS}/b8 --models resnet50 --batch 8 && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/export_models.py ${DC_TRAIN_MODELS}/b2 --models bert_base --batch 2")
set_tests_properties(export_train_models PROPERTIES LABELS long FIXTURES_SETUP train_models TIMEOUT 1500)
add_test(NAME train_tune_run_resnet50_b8 COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/check_train_plans.py
  $<TARGET_FILE:dc-coordinator> $<TARGET_FILE:dc-run> ${DC_TRAIN_MODELS}/b8/resnet50/model.onnx
  --ulp-bound --timeout 7000 --local-workers 2 --top-k 2 --run-deadline 600 --compile-deadline 300)
add_test(NAME train_tune_run_bert_base_b2 COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/check_train_plans.py
  $<TARGET_FILE:dc-coordinator> $<TARGET_FILE:dc-run> ${DC_TRAIN_MODELS}/b2/bert_base/model.onnx
  --loss mse --timeout 7000 --local-workers 2 --top-k 1 --run-deadline 600 --compile-deadline 300)
set_tests_properties(train_tune_run_resnet50_b8 train_tune_run_bert_base_b2 PROPERTIES LABELS long
  FIXTURES_REQUIRED train_models TIMEOUT 14400 RUN_SERIAL TRUE)
