# The two TPU VM chaos drills (a Ray pod each, trainers on every host, minutes of recoveries)
# share one xdist group, so that `make test-slow` runs them one after the other on one worker:
# side by side on CI's two cores each bring-up and recovery took over twice as long (the
# in-process drill's pod came up in 438 s and the drill ran past its timeout).
TPU_DRILLS = "tpu-drills"
