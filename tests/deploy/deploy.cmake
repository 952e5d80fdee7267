# The cluster launchers of examples/deploy/ (issue 28): flags against the binaries' --help,
# the Kubernetes manifests against the Kubernetes schemas, the systemd units through
# systemd-analyze verify, and the Slurm batch script run as a job step (srun shimmed) until
# its dc-worker joins a farm service on loopback. tests/deploy/check_deploy.py; ~10 s.
add_test(NAME deploy_launchers COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_deploy.py
  $<TARGET_FILE:dc-coordinator> $<TARGET_FILE:dc-worker> ${PROJECT_SOURCE_DIR})
set_tests_properties(deploy_launchers PROPERTIES LABELS unit TIMEOUT 300)

# The Slurm batch script on a real single-node Slurm (munged, slurmctld and slurmd from
# Debian's packages, started as root in a private folder on free loopback ports): the job's
# worker joins a `serve`, measures a tune through it and leaves on scancel.
# tests/deploy/check_slurm_cluster.py; ~30 s. Label slurm: CI runs it (scripts/test.sh runs
# every label but the long ones); it needs root, as scripts/install-deps.sh does.
add_test(NAME deploy_slurm_cluster COMMAND ${DC_PY} ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_slurm_cluster.py
  $<TARGET_FILE:dc-coordinator> $<TARGET_FILE:dc-worker> ${PROJECT_SOURCE_DIR})
set_tests_properties(deploy_slurm_cluster PROPERTIES LABELS slurm TIMEOUT 900)
