#!/bin/bash
# The final form on an H200, the issue's machine (none lent from the twenty-first to the
# twenty-fifth session; written in the twenty-fifth, not run):
#   run(command="scripts/call25d.sh", carry=["build/variants/final25"])
# The forward against the cuBLAS grouped pipeline on the four shapes and the saved backward against
# torch autograd on the same routing (scripts/device_lib.sh, moe_final_form).
. "$(dirname "$0")/device_lib.sh"
device_start
moe_final_form final25 25th
echo "done $(el)"
