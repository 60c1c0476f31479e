#!/bin/sh
# Docker: enough /dev/shm for the DataLoader (the default is 64 MB), SYS_PTRACE for py-spy, and
# the metrics port. dlwatch runs inside the training container, in front of the job.
# --init: a real init as PID 1 (docker's tini) reaps the processes orphaned when a worker or the
# job is killed; dlwatch is not an init. --user: the container runs as you, so the reports it
# writes into the bind mount (0700 folders, 0600 files) are yours, not root's.
exec docker run --rm --init \
  --user "$(id -u):$(id -g)" \
  --shm-size=8g \
  --cap-add SYS_PTRACE \
  -p 9400:9400 \
  -v "$PWD/dlwatch-reports:/workspace/dlwatch-reports" \
  my-registry/train:latest \
  dlwatch run --metrics-port 9400 --metrics-addr 0.0.0.0 --report-dir /workspace/dlwatch-reports -- python train.py --epochs 10
