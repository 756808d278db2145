// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// lbtest: the production program (lb.c) with the test hooks of hooks.h:
// "now" is the `clock_ticks` map instead of bpf_jiffies64, and each
// packet's verdict is recorded in the `verdicts` map, for `lbc replay
// --target xdp` and the differential test.

#define LBC_TEST 1

#include "lb.c"
