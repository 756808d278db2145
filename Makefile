# Generated files are committed; these targets regenerate and check them.
# `make check-generated` regenerates into a temporary directory and fails if
# the result differs from what is committed (CI runs it).

GO ?= go

.PHONY: all bpf check-generated check-generated-bpf p4 check-generated-p4 testbench p4-tna flake

all: bpf

# XDP datapath: fallback/bpf/lb.c → fallback/lb{,test}_bpfel.{go,o} (bpf2go,
# clang, llvm-strip, libbpf-dev headers).
bpf:
	cd fallback && BPF2GO_OUT=. $(GO) generate ./

check-generated: check-generated-bpf check-generated-p4 check-generated-p4-tna

check-generated-bpf:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	cp fallback/bpf/crc32_table.h $$tmp/crc32_table.h.committed && \
	(cd fallback && BPF2GO_OUT=$$tmp $(GO) generate ./) && \
	status=0 && \
	for f in lb_bpfel.go lb_bpfel.o lbtest_bpfel.go lbtest_bpfel.o lbbench_bpfel.go lbbench_bpfel.o; do \
		cmp -s $$tmp/$$f fallback/$$f || { echo "fallback/$$f differs from what 'make bpf' generates; run make bpf and commit"; status=1; }; \
	done; \
	cmp -s $$tmp/crc32_table.h.committed fallback/bpf/crc32_table.h || { echo "fallback/bpf/crc32_table.h differs from what 'make bpf' generates"; cp $$tmp/crc32_table.h.committed fallback/bpf/crc32_table.h; status=1; }; \
	exit $$status

# P4 pipeline: p4/lb.p4 → p4/build/lb.json (BMv2) and lb.p4info.txtpb
# (P4Runtime). Run from the repository root so source paths in lb.json stay
# relative. Conntrack size: add P4FLAGS=-DCT_BUCKETS=65536 (default 16384
# buckets × 4 ways).
P4C ?= p4c
P4FLAGS ?=
p4:
	$(P4C) --target bmv2 --arch v1model $(P4FLAGS) -o p4/build --p4runtime-files p4/build/lb.p4info.txtpb p4/lb.p4
	rm -f p4/build/lb.p4i

check-generated-p4:
	@command -v $(P4C) >/dev/null || { echo "check-generated-p4: $(P4C) not on PATH; skipped"; exit 0; }; \
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	mkdir -p $$tmp/p4/build && cp p4/lb.p4 $$tmp/p4/ && \
	(cd $$tmp && $(P4C) --target bmv2 --arch v1model $(P4FLAGS) -o p4/build --p4runtime-files p4/build/lb.p4info.txtpb p4/lb.p4) && \
	status=0 && \
	for f in lb.json lb.p4info.txtpb; do \
		cmp -s $$tmp/p4/build/$$f p4/build/$$f || { echo "p4/build/$$f differs from what 'make p4' generates; run make p4 and commit"; status=1; }; \
	done; \
	exit $$status

# TNA program (Tofino): p4/tna/lb.p4 → p4/tna/build/lb.p4info.txtpb, by the
# front end of a p4c built with the Tofino back end (-DENABLE_TOFINO=ON, see
# docs/toolchain.md): its p4test finds tna.p4 in its own p4include. Set
# TNA_INCLUDE to a directory holding tna.p4 if yours does not. Skipped with
# the reason when p4test or tna.p4 is absent; targets/tofino's tests check
# the committed file.
P4TEST ?= p4test
TNA_INCLUDE ?=
TNA_OUT ?= p4/tna/build
p4: p4-tna
p4-tna:
	@command -v $(P4TEST) >/dev/null || { echo "p4-tna: $(P4TEST) not on PATH; skipped (docs/toolchain.md builds it)"; exit 0; }; \
	probe=$$(mktemp --suffix=.p4) && echo '#include <tna.p4>' > $$probe && \
	$(P4TEST) -D__TARGET_TOFINO__=1 $(if $(TNA_INCLUDE),-I $(TNA_INCLUDE)) $$probe >/dev/null 2>&1; \
	ok=$$?; rm -f $$probe; \
	[ $$ok = 0 ] || { echo "p4-tna: $(P4TEST) finds no tna.p4 (a p4c built without -DENABLE_TOFINO=ON); set TNA_INCLUDE to p4c's backends/tofino/bf-p4c/p4include; skipped"; exit 0; }; \
	$(P4TEST) -D__TARGET_TOFINO__=1 $(if $(TNA_INCLUDE),-I $(TNA_INCLUDE)) --p4runtime-files $(TNA_OUT)/lb.p4info.txtpb p4/tna/lb.p4

check-generated-p4-tna:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(MAKE) -s p4-tna TNA_OUT=$$tmp >$$tmp/log 2>&1 || { cat $$tmp/log; exit 1; }; \
	if grep -q skipped $$tmp/log; then sed -n 's/^p4-tna/check-generated-p4-tna/p' $$tmp/log; exit 0; fi; \
	cmp -s $$tmp/lb.p4info.txtpb p4/tna/build/lb.p4info.txtpb || { echo "p4/tna/build/lb.p4info.txtpb differs from what 'make p4-tna' generates; run make p4-tna and commit"; exit 1; }

# Scenario testbench (root): run one scenario end to end and write its report.
#   make testbench SCENARIO=seed001-failover [TOPOLOGY=netns|mininet] [OUT=dir]
# SCENARIO is a shipped name (testbench/scenarios/*.yaml) or a YAML file.
SCENARIO ?= seed001-failover
TOPOLOGY ?= netns
testbench:
	$(GO) run ./cmd/lbc-testbench run $(SCENARIO) --topology $(TOPOLOGY) $(if $(OUT),--out $(OUT))
	
# Flaky-test hunt: the packages whose tests run goroutines, servers and
# clocks (P4Runtime client and test server, controller, the P4 targets,
# the GSLB's DNS and metrics pollers), many times over and then under the
# race detector. A single failure is a defect to fix, not to retry.
#   make flake [FLAKE_COUNT=200] [FLAKE_RACE_COUNT=50] [FLAKE_PKGS=...]
FLAKE_PKGS ?= ./runtime ./testbench/p4rt ./controller/... ./targets/bmv2 ./targets/tofino ./gslb/metrics ./gslb/proximity ./gslb/dnsserver
FLAKE_COUNT ?= 200
FLAKE_RACE_COUNT ?= 50
flake:
	$(GO) test -timeout 3h -count=$(FLAKE_COUNT) $(FLAKE_PKGS)
	$(GO) test -timeout 3h -race -count=$(FLAKE_RACE_COUNT) $(FLAKE_PKGS)
