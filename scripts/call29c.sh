#!/bin/bash
# The twenty-ninth session's last call: the issue tables with warp 1 releasing (publish 2, the new
# default; p28's code is the final code's, and KOSMOS_PUBLISH=2 gives the default's behaviour):
# forward against the cub + cuBLAS grouped pipeline, saved backward against torch autograd.
#   run(command="scripts/call29c.sh", carry=["build/variants/p28"])
. "$(dirname "$0")/device_lib.sh"
device_start
KOSMOS_PUBLISH=2 moe_final_form p28 29th-p2
echo "final form (KOSMOS_PUBLISH=2) $(el)"
