#!/usr/bin/env bash
# One device call: the Hopper attention tests and bench, then ZeRO on the emulated link (prebuilt binaries).
export NCCL_NVLS_ENABLE=0
B=$PWD/.devrun/bin
ldd $B/minidp-bench | grep -q "not found" && export LD_LIBRARY_PATH=$PWD/.devrun/lib
ldd $B/minidp-bench | grep "not found"
nvidia-smi -L
mkdir -p $OUT/sm90
t0=$SECONDS
timeout 45 $B/test_flash_attention_sm90 --gtest_brief=1 --gtest_filter='-*PingPong*' > $OUT/sm90/test.txt 2>&1
echo "sm90 test rc $? ($((SECONDS-t0)) s)"; grep -E "FAILED|PASSED|tests ran" $OUT/sm90/test.txt | head -12
t0=$SECONDS
MINIDP_ATTENTION=sm90 timeout 30 $B/test_flash_attention --gtest_brief=1 --gtest_filter='FlashAttentionCuda*:FlashAttentionOp*' > $OUT/sm90/op_test.txt 2>&1
echo "op test with sm90 rc $? ($((SECONDS-t0)) s)"; grep -E "FAILED|PASSED|tests ran" $OUT/sm90/op_test.txt | head -6
t0=$SECONDS
timeout 30 $B/minidp-bench-attention --sm90 --shapes 4:16:16:4096:128,4:32:32:4096:64,8:16:4:2048:128 > $OUT/sm90/bench.txt 2>&1
echo "bench rc $? ($((SECONDS-t0)) s)"; cat $OUT/sm90/bench.txt | tail -20
t0=$SECONDS
TOKENS=$PWD/.devrun/tokens ZE_STEPS="--steps 5 --warmup 2" ZE_TIMEOUT=20 ZE_BIG_TIMEOUT=40 scripts/zero-emulated-job.sh $OUT/zero $B
echo "zero job ($((SECONDS-t0)) s)"
