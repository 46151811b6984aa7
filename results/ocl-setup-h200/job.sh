# Sourced by the device-machine scripts under results/ after they set R (their results folder) and END (seconds):
# job GPU CORES NAME COMMAND... runs one job on its GPU and cores until END, its output in $R/NAME.txt and its
# exit status and finishing time appended to $R/rc.txt; a job with under 30 s left is not started, and says so.
# (results/s21-h200/ and earlier scripts carry their own copy of it, as they ran.)
job() {
  local gpu=$1 cores=$2 name=$3 left=$(( END - SECONDS )); shift 3
  if [ $left -lt 30 ]; then echo "$name not started ($SECONDS s)" >> $R/rc.txt; return; fi
  (CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_COMPILE_THREADS=16 taskset -c $cores timeout $left "$@" > $R/$name.txt 2>&1
   echo "$name rc=$? $SECONDS s" >> $R/rc.txt)
}
