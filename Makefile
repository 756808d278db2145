# Generated files are committed; these targets regenerate and check them.
# `make check-generated` regenerates into a temporary directory and fails if
# the result differs from what is committed (CI runs it).

GO ?= go

.PHONY: all build test bpf bench-katran mutate check-generated check-generated-bpf p4 p4-v1model check-generated-p4 testbench p4-tna flake soak proto check-generated-proto testgen check-generated-testgen

# make (make build): the two binaries, ./lbc and ./lbc-testbench, at the root
# of the tree (git ignores them). go install ./cmd/... puts them in
# $(go env GOPATH)/bin instead.
all: build
build:
	$(GO) build -o . ./cmd/lbc ./cmd/lbc-testbench

# The tests, as `go test ./...` runs them, with the skipped tests and their
# reasons listed at the end (go test without -v prints no skip). Exit status:
# go test's. Flags and packages: make test TESTARGS="-race ./controller/..."
TESTARGS ?= ./...
# LBC_FULL_LIVE=1: the long live suites run in full (internal/testenv);
# all 267 P4Testgen tests on BMv2 take about 9 minutes of one package on an
# idle machine, so the package timeout is 30 minutes, not go test's 10.
test:
	LBC_FULL_LIVE=1 $(GO) run ./internal/cmd/testsummary -timeout 30m $(TESTARGS)

# XDP datapath: fallback/bpf/{lb,lbtest,lbbench}.c and their headers →
# fallback/lb{,test,bench}_bpfel.{go,o} (bpf2go,
# clang, llvm-strip, libbpf-dev headers).
bpf:
	cd fallback && BPF2GO_OUT=. $(GO) generate ./

check-generated: check-generated-bpf check-generated-p4 check-generated-p4-tna check-generated-proto check-generated-testgen

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

# Fleet protocol (R-FLEET, docs/fleet.md): fleet/fleetpb/fleet.proto →
# fleet.pb.go and fleet_grpc.pb.go. protoc (Debian package
# protobuf-compiler) with the plugins pinned as tools in go.mod
# (protoc-gen-go, protoc-gen-go-grpc); skipped with the reason when protoc
# is absent.
PROTOC ?= protoc
PROTO_OUT ?= .
proto:
	@command -v $(PROTOC) >/dev/null || { echo "proto: $(PROTOC) not on PATH; skipped (apt-get install protobuf-compiler)"; exit 0; }; \
	$(PROTOC) --plugin=protoc-gen-go="$$($(GO) tool -n protoc-gen-go)" --plugin=protoc-gen-go-grpc="$$($(GO) tool -n protoc-gen-go-grpc)" \
		--go_out=$(PROTO_OUT) --go_opt=paths=source_relative --go-grpc_out=$(PROTO_OUT) --go-grpc_opt=paths=source_relative fleet/fleetpb/fleet.proto

check-generated-proto:
	@command -v $(PROTOC) >/dev/null || { echo "check-generated-proto: $(PROTOC) not on PATH; skipped"; exit 0; }; \
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(MAKE) -s proto PROTO_OUT=$$tmp && status=0 && \
	for f in fleet.pb.go fleet_grpc.pb.go; do \
		cmp -s $$tmp/fleet/fleetpb/$$f fleet/fleetpb/$$f || { echo "fleet/fleetpb/$$f differs from what 'make proto' generates; run make proto and commit"; status=1; }; \
	done; exit $$status

# P4 pipeline: p4/lb.p4 → p4/build/lb.json (BMv2) and lb.p4info.txtpb
# (P4Runtime). p4/lb.p4 is the entry file; it #includes P4_V1MODEL_SRC
# (p4/include, shared with the TNA program, and p4/v1model). Run from the
# repository root so source paths in lb.json stay relative. Conntrack size:
# add P4FLAGS=-DCT_BUCKETS=65536 (default 16384 buckets × 4 ways).
P4C ?= p4c
P4FLAGS ?=
P4_V1MODEL_SRC = p4/lb.p4 p4/include p4/v1model
# make p4 builds both programs; make p4-v1model the BMv2 one (make mutate
# rebuilds each v1model mutant with it).
p4: p4-v1model
p4-v1model:
	$(P4C) --target bmv2 --arch v1model $(P4FLAGS) -o p4/build --p4runtime-files p4/build/lb.p4info.txtpb p4/lb.p4
	rm -f p4/build/lb.p4i

check-generated-p4:
	@$(GO) test -count=1 -run '^TestV1ModelBuildMatchesSource$$' ./targets/bmv2 >/dev/null || { $(GO) test -count=1 -run '^TestV1ModelBuildMatchesSource$$' ./targets/bmv2; exit 1; }; \
	command -v $(P4C) >/dev/null || { echo "check-generated-p4: $(P4C) not on PATH: p4/build checked against p4/lb.p4 only (TestV1ModelBuildMatchesSource), not recompiled"; exit 0; }; \
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	mkdir -p $$tmp/p4/build && cp -r $(P4_V1MODEL_SRC) $$tmp/p4/ && \
	(cd $$tmp && $(P4C) --target bmv2 --arch v1model $(P4FLAGS) -o p4/build --p4runtime-files p4/build/lb.p4info.txtpb p4/lb.p4) && \
	status=0 && \
	for f in lb.json lb.p4info.txtpb; do \
		cmp -s $$tmp/p4/build/$$f p4/build/$$f || { echo "p4/build/$$f differs from what 'make p4' generates; run make p4 and commit"; status=1; }; \
	done; \
	exit $$status

# TNA program (Tofino): p4/tna/lb.p4 (the entry file: it #includes
# p4/include, shared with the v1model program, and the rest of p4/tna),
# compiled by the Tofino back end of
# p4c (p4c-barefoot and its assembler bfas; docs/toolchain.md builds them)
# for Tofino 1 (--target tofino --arch tna, 12 stages) and Tofino 2
# (--target tofino2 --arch t2na, 20 stages). Committed under TNA_OUT: each
# target's P4Info, bf-rt.json and resources summary (cmd/tna-build, from
# the compiler's resources.json), and context.json (the driver's view of
# the placement; compared without its build_date, run_id and
# compiler_version). The P4Info lists counters and registers as standard
# P4Runtime entities (--p4runtime-force-std-externs, as Stratum wants), so
# `lbc status` reads them as on BMv2. The device files
# (device/<target>/pipe/tofino*.bin and context.json) are written too, for
# `lbc push --device-config`; the binary is not committed (it differs from
# run to run). Everything is built in a temporary directory and copied to
# TNA_OUT only when every step of both targets succeeded: a compile that
# fails, or a target that no longer fits (bfas refuses it), replaces
# nothing, so no output is left from another compile than the others.
# Skipped with the reason when the compiler is absent.
# Each target is compiled twice, release and -g, and one compile cannot do
# both: the resource summary reads logs/resources.json and phv.json, which
# p4c-barefoot writes only with -g (bf-p4c's GenerateOutputs adds its
# ResourcesLogging and PhvLogging passes only then), and -g also changes
# what is assembled: the .bfa's phv section gains a context_json block
# (PHV live ranges for P4 Insight) that bfas carries into context.json, so
# a -g context.json is not the release one committed and pushed. The -g
# compile is not assembled.
P4C_BAREFOOT ?= p4c-barefoot
BFAS ?= bfas
TNA_OUT ?= p4/tna/build
p4: p4-tna
p4-tna:
	@command -v $(P4C_BAREFOOT) >/dev/null && command -v $(BFAS) >/dev/null || { echo "p4-tna: $(P4C_BAREFOOT) or $(BFAS) not on PATH; skipped (docs/toolchain.md builds them)"; exit 0; }; \
	set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; stage=$$tmp/out; \
	for spec in tofino:tna:12: tofino2:t2na:20:tofino2/; do \
		target=$${spec%%:*}; rest=$${spec#*:}; arch=$${rest%%:*}; rest=$${rest#*:}; stages=$${rest%%:*}; sub=$${rest#*:}; \
		out=$$stage/$$sub; mkdir -p $$out; \
		echo "p4-tna: $$target ($$arch)"; \
		$(P4C_BAREFOOT) --target $$target --arch $$arch -o $$tmp/$$target --p4runtime-files $$tmp/$$target/lb.p4info.txtpb \
			--p4runtime-force-std-externs --bf-rt-schema $$tmp/$$target/bf-rt.json p4/tna/lb.p4 >$$tmp/$$target.log 2>&1 || { cat $$tmp/$$target.log; echo "p4-tna: $$target: the compile failed; $(TNA_OUT) left as it was"; exit 1; }; \
		$(P4C_BAREFOOT) --target $$target --arch $$arch -g -o $$tmp/$$target-g p4/tna/lb.p4 >/dev/null 2>&1 || { echo "p4-tna: $$target: the -g compile failed; $(TNA_OUT) left as it was"; exit 1; }; \
		$(BFAS) -o $$tmp/$$target/pipe $$tmp/$$target/pipe/lb.bfa >$$tmp/$$target-bfas.log 2>&1 || { \
			echo "p4-tna: $$target does not fit: $$(grep -o 'supports up to.*' $$tmp/$$target-bfas.log | head -1); $(TNA_OUT) left as it was"; exit 1; }; \
		cp $$tmp/$$target/lb.p4info.txtpb $$tmp/$$target/bf-rt.json $$tmp/$$target/pipe/context.json $$out/; \
		$(GO) run ./cmd/tna-build resources -stages $$stages -title "p4/tna/lb.p4 for $$target ($$arch), default sizes, $$($(P4C_BAREFOOT) --version 2>&1 | tr '\n' ' ' | sed 's/ *$$//')" \
			$$tmp/$$target-g/pipe/logs > $$out/resources-$$target.txt; \
		dev=$$stage/device/$$target; mkdir -p $$dev/pipe; \
		cp $$tmp/$$target/pipe/tofino*.bin $$tmp/$$target/pipe/context.json $$dev/pipe/; \
		cp $$tmp/$$target/bf-rt.json $$dev/; echo "p4-tna: $$target fits"; \
	done; \
	mkdir -p $(TNA_OUT)/tofino2; \
	for f in lb.p4info.txtpb bf-rt.json context.json resources-tofino.txt tofino2/lb.p4info.txtpb tofino2/bf-rt.json tofino2/context.json tofino2/resources-tofino2.txt; do \
		cp $$stage/$$f $(TNA_OUT)/$$f; \
	done; \
	rm -rf $(TNA_OUT)/device; cp -r $$stage/device $(TNA_OUT)/device; \
	echo "p4-tna: both targets fit; outputs in $(TNA_OUT), device files in $(TNA_OUT)/device"

# Without p4c-barefoot, the committed outputs are still checked against the
# source and each other (cmd/tna-build check: tofino.CheckBuild, the test
# TestTNABuildMatchesSource); with it, they are also compiled afresh and
# compared (cmd/tna-build same).
check-generated-p4-tna:
	@$(GO) run ./cmd/tna-build check || exit 1; \
	if ! command -v $(P4C_BAREFOOT) >/dev/null || ! command -v $(BFAS) >/dev/null; then \
		echo "check-generated-p4-tna: $(P4C_BAREFOOT) or $(BFAS) not on PATH: p4/tna/build checked against p4/tna/lb.p4 only (tna-build check), not recompiled"; exit 0; fi; \
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(MAKE) -s p4-tna TNA_OUT=$$tmp >$$tmp/log 2>&1 || { cat $$tmp/log; exit 1; }; \
	status=0; for f in lb.p4info.txtpb bf-rt.json context.json tofino2/lb.p4info.txtpb tofino2/bf-rt.json tofino2/context.json; do \
		$(GO) run ./cmd/tna-build same $$tmp/$$f p4/tna/build/$$f 2>/dev/null || { echo "p4/tna/build/$$f differs from what 'make p4-tna' generates; run make p4-tna and commit"; status=1; }; \
	done; \
	for f in resources-tofino.txt tofino2/resources-tofino2.txt; do \
		cmp -s $$tmp/$$f p4/tna/build/$$f || { echo "p4/tna/build/$$f differs from what 'make p4-tna' generates; run make p4-tna and commit"; diff $$tmp/$$f p4/tna/build/$$f | head -5; status=1; }; \
	done; exit $$status

# P4Testgen tests (issue 21; docs/tofino.md, "Generated tests"): STF tests
# of p4/lb.p4 (BMv2) and p4/tna/lb.p4 (Tofino 1 and 2), committed under
# TESTGEN_OUT/<target>, with the command and p4testgen's final statement
# coverage in each directory's COMMAND. targets/testgen runs them in go
# test (sim-p4 and live BMv2 for v1model, sim.TNA for TNA); after
# regenerating, rewrite its result lists with
#   go test ./targets/testgen -run TestGeneratedOnModels -update
# and review the diff. The "Date generated" line and the per-test traces
# ("# [...]" comments, 80 % of the bytes) are dropped to keep the files
# small (p4testgen --out-dir DIR with the COMMAND's flags shows them). P4Testgen
# built here is not deterministic: the same command and seed give a
# different set of tests from run to run (docs/tofino.md), so
# check-generated-testgen cannot compare files; it generates afresh and
# runs the fresh tests through the same harness (TestGeneratedOnModels with
# LBC_TESTGEN_FRESH): every one must agree with its model or be outside its
# domain. A target whose generation fails replaces nothing. Skipped with
# the reason when p4testgen is absent (docs/toolchain.md builds it).
P4TESTGEN ?= p4testgen
TESTGEN_OUT ?= targets/testgen/testdata
TESTGEN_SEED ?= 1000
# Frames of 14 to 512 bytes (the flag is in bits), statement coverage
# tracked. Per target, the path selection, the paths tried and the seed
# (TESTGEN_RUNS, target=POLICY/MAX[/SEED], TESTGEN_SEED when no SEED),
# measured here (docs/tofino.md,
# "Keeping P4Testgen inside lbc's domain"): on p4/lb.p4 greedy statement
# search reaches ≥ 90 % where random backtracking stays near 85 %, and
# 1,000 paths make it steady from run to run (P4Testgen is not
# deterministic); on Tofino 1 greedy reaches the most statements; on
# Tofino 2 greedy stops after its first test (an unimplemented tainted
# header validity), so random backtracking. On Tofino 1, 1,000 paths (2
# minutes) give 957 tests, 38 of them forwarding to a backend, and 84 % of
# the statements; 300 gave 277, 3 and 78 %. P4Testgen is not deterministic,
# and on p4/lb.p4 how many tests forward a tracked flow (a new conntrack
# entry) varies from run to run: with the ring pool, 3 and 17 at seed 1, 4
# at seed 1000, 5 at seed 7; the committed set is the one of 17.
TESTGEN_RUNS ?= bmv2=GREEDY_STATEMENT_SEARCH/1000/1 tofino=GREEDY_STATEMENT_SEARCH/1000 tofino2=RANDOM_BACKTRACK/300
# -DLBC_TESTGEN turns the programs' DOMAIN(...) lines into P4Testgen
# assumptions (p4/include/define.p4): entries only as lbc's compiler
# writes them.
TESTGEN_FLAGS ?= -DLBC_TESTGEN --test-backend STF --packet-size-range 112:4096 \
	--track-coverage STATEMENTS --print-coverage
# The live switch's ports 1-3 (targets/bmv2/live) and, on BMv2, its CPU
# port 255 (the clock probe's packet-out); Tofino 2's front-panel ports
# start at 8 (P4Testgen's own Tofino 2 tests use 8 and up).
# target:arch:source:ports[:__TARGET_TOFINO__]
TESTGEN_SPECS ?= bmv2:v1model:p4/lb.p4:1-3,255-255 tofino:tna:p4/tna/lb.p4:1-3:1 tofino2:t2na:p4/tna/lb.p4:8-10:2
# P4Testgen (this p4c) cannot run p4/tna/lb.p4 as it is: its Tofino Hash.get
# reads a CRCPolynomial argument from the call instead of the declaration
# and crashes (targets/tofino/shared_expr_stepper.cpp, "Hash.get"), and
# Resubmit.emit is not implemented. The TNA tests are generated from a copy
# of p4/include and p4/tna in which every CUSTOM hash is the predefined
# CRC32 (the R-HASH hashes' own polynomial, reflection, init and final XOR;
# the conntrack ways' other polynomials are lost) and resubmit.emit is
# commented out; docs/tofino.md says what that leaves out. Its Tofino
# target also crashes on a RegisterAction's this.predicate(c0[, c1]) ("Cast
# failed: this with type This is not a PathExpression"), so the copy spells
# the predicate out: one bit set of 4, bit c1*2 + c0 (the same value).
TESTGEN_TNA_EDIT = s/(HashAlgorithm_t.CUSTOM, [a-z_0-9]*)/(HashAlgorithm_t.CRC32)/; s|^\([[:space:]]*\)resubmit.emit(md.resub);|\1// resubmit.emit(md.resub); (not implemented by P4Testgen)|; \
	s/p = this\.predicate(\([^,;]*\), \([^;]*\));/if (\1) { if (\2) { p = 8; } else { p = 2; } } else { if (\2) { p = 4; } else { p = 1; } }/; \
	s/p = this\.predicate(\([^,;]*\));/if (\1) { p = 2; } else { p = 1; }/
testgen:
	@command -v $(P4TESTGEN) >/dev/null || { echo "testgen: $(P4TESTGEN) not on PATH; skipped (docs/toolchain.md builds it)"; exit 0; }; \
	tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	for spec in $(TESTGEN_SPECS); do \
		target=$$(echo $$spec | cut -d: -f1); arch=$$(echo $$spec | cut -d: -f2); src=$$(echo $$spec | cut -d: -f3); \
		ports=$$(echo $$spec | cut -d: -f4); tofino=$$(echo $$spec | cut -d: -f5); \
		out=$$tmp/$$target; mkdir -p $$out; \
		run=$$(for r in $(TESTGEN_RUNS); do [ "$${r%%=*}" = "$$target" ] && echo $${r#*=}; done); run=$${run:-RANDOM_BACKTRACK/300}; \
		policy=$$(echo $$run | cut -d/ -f1); max=$$(echo $$run | cut -d/ -f2); seed=$$(echo $$run | cut -s -d/ -f3); \
		flags="$(TESTGEN_FLAGS) --seed $${seed:-$(TESTGEN_SEED)} --path-selection $$policy --max-tests $$max --port-ranges $$(echo $$ports | tr - :)"; \
		if [ -n "$$tofino" ]; then mkdir -p $$tmp/src-$$target/p4; cp -r p4/include p4/tna $$tmp/src-$$target/p4/; rm -rf $$tmp/src-$$target/p4/tna/build; \
			find $$tmp/src-$$target/p4 -name '*.p4' -exec sed -i '$(TESTGEN_TNA_EDIT)' {} +; \
			src=$$tmp/src-$$target/$$src; flags="-D__TARGET_TOFINO__=$$tofino $$flags"; fi; \
		cmd="$(P4TESTGEN) --target $$target --arch $$arch $$flags --out-dir OUT $${src#$$tmp/}"; \
		echo "testgen: $$target ($$arch)"; \
		if ! $(P4TESTGEN) --target $$target --arch $$arch $$flags --out-dir $$out $$src >$$tmp/$$target.log 2>&1; then \
			tail -20 $$tmp/$$target.log; echo "testgen: $$target: p4testgen failed; $(TESTGEN_OUT)/$$target left as it was"; continue; fi; \
		for f in $$out/*.stf; do sed -i '/^# Date generated:/d; /^# \[AssignmentStatement\]: ig_dprsr_md.resubmit_type = /{s/.*/$(TESTGEN_RESUBMIT_NOTE)/;}; /^# \[/d' $$f; awk '!(/^# note:/ && seen[$$0]++)' $$f > $$f.u && mv $$f.u $$f; done; \
		{ echo "$$cmd" | sed 's/[[:space:]][[:space:]]*/ /g'; echo "source: sha256 $$($(TESTGEN_SOURCE_HASH))"; echo "p4testgen of $$(p4c --version 2>/dev/null | tail -1)$${tofino:+; source: p4/include and p4/tna edited by the Makefile's TESTGEN_TNA_EDIT (CRC32 hashes, resubmit.emit commented out)}"; \
		  grep 'Nodes covered' $$tmp/$$target.log | tail -1 | sed 's/=//g; s/^ *//; s/ *$$//'; \
		  awk '/Not covered program nodes/{n=NR} {l[NR]=$$0} END{if(n) for(i=n;i<=NR;i++) if(l[i] ~ /^\t/) print l[i]}' $$tmp/$$target.log | grep -E '^\s' | sed "s/^[[:space:]]*/not covered: /; s|^not covered: $$tmp/src-[a-z0-9]*/|not covered: |"; } > $$out/COMMAND; \
		rm -rf $(TESTGEN_OUT)/$$target; mkdir -p $(TESTGEN_OUT)/$$target; cp $$out/*.stf $$out/COMMAND $(TESTGEN_OUT)/$$target/; \
		echo "testgen: $$target: $$(ls $$out/*.stf | wc -l) tests in $(TESTGEN_OUT)/$$target"; \
	done

# P4Testgen's trace says where a TNA path resubmits; the test then shows
# pass 1 only (resubmit.emit is not implemented, above), and the harness
# leaves it out of the comparison (targets/testgen, Model.Domain).
TESTGEN_RESUBMIT_NOTE = \# note: resubmits (ig_dprsr_md.resubmit_type set): pass 2, which P4Testgen does not run, decides the packet

# The hash of the sources a set was generated from (in COMMAND; the Go
# test TestGeneratedSetsMatchSources recomputes it): sha256sum of each .p4
# file of the program, in byte order of their paths, hashed again.
TESTGEN_SOURCE_HASH = { if [ "$$arch" = v1model ]; then find p4/lb.p4 p4/include p4/v1model -name '*.p4'; else find p4/include p4/tna -name '*.p4'; fi; } | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1

check-generated-testgen:
	@command -v $(P4TESTGEN) >/dev/null || { echo "check-generated-testgen: $(P4TESTGEN) not on PATH: nothing regenerated (go test runs the committed tests)"; exit 0; }; \
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(MAKE) -s testgen TESTGEN_OUT=$$tmp >$$tmp/log 2>&1 || { cat $$tmp/log; exit 1; }; \
	grep -v ': [0-9]* tests in' $$tmp/log | grep . ; \
	LBC_TESTGEN_FRESH=$$tmp $(GO) test -count=1 -run 'TestGeneratedOnModels' ./targets/testgen >$$tmp/test.log 2>&1 || { cat $$tmp/test.log; echo "check-generated-testgen: freshly generated tests disagree with the models"; exit 1; }; \
	for spec in $(TESTGEN_SPECS); do target=$${spec%%:*}; \
		[ -f $$tmp/$$target/COMMAND ] && echo "check-generated-testgen: $$target: $$(ls $$tmp/$$target/*.stf | wc -l) fresh tests agree or are outside the model's domain; $$(grep 'Nodes covered' $$tmp/$$target/COMMAND) (committed: $$(grep 'Nodes covered' $(TESTGEN_OUT)/$$target/COMMAND 2>/dev/null))"; \
	done

# Scenario testbench (root): run one scenario end to end and write its report.
#   make testbench SCENARIO=seed001-failover [TOPOLOGY=netns|mininet] [OUT=dir]
# SCENARIO is a shipped name (testbench/scenarios/*.yaml) or a YAML file.
# Both binaries are built: fleet and controller: process scenarios run the
# lbc beside lbc-testbench.
SCENARIO ?= seed001-failover
TOPOLOGY ?= netns
testbench: build
	./lbc-testbench run $(SCENARIO) --topology $(TOPOLOGY) $(if $(OUT),--out $(OUT))
	
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

# Mutation score (issue 32; docs/p4.md, "Mutation score"): applies each
# mutation of internal/mutation/mutations.txt to a scratch copy of the
# tracked files and runs its target's tests (models: testgen, traces, chain,
# tofino, sim, XDP, BMv2; v1model: p4c on the mutant, then the BMv2 tests;
# TNA: the compiler-free source checks). Each must fail some test. Tens of
# minutes; root for the XDP and mininet-free BMv2 steps.
#   make mutate [MUTATE=REGEXP] [MUTATE_OUT=mutate.md]
MUTATE ?=
MUTATE_OUT ?= mutate.md
mutate:
	$(GO) test -timeout 6h -count=1 -v -run '^TestMutationScore$$' ./internal/mutation -mutate -mutate.only '$(MUTATE)' -mutate.out $(abspath $(MUTATE_OUT))

# Soak (issue 25, item 7; docs/controller.md, "Soak"): the lbc binary, built
# here, runs as `lbc run --target bmv2` against the tests' P4Runtime server
# for SOAK (default 30m) with health flaps every 3 s, a reload every 30 s
# and scrapes 4 times a second; its RSS, goroutines and open files must stay
# flat and its log hold no unexplained WARN/ERROR line. No root needed.
#   make soak [SOAK=2m] [SOAK_OUT=soak-out]
SOAK ?= 30m
SOAK_OUT ?= soak-out
soak:
	$(GO) run ./cmd/lbc-testbench soak --duration $(SOAK) --out $(SOAK_OUT)

# lbc beside Katran in the same run (issue 34; docs/xdp.md, "Beside Katran,
# same runs"). Root. KATRAN is a checkout of facebookincubator/katran at
# KATRAN_COMMIT (not vendored, not in CI). Builds Katran's balancer.bpf.o
# with Katran's own flags (katran/lib/Makefile-bpf, laid out as
# build_bpf_modules_opensource.sh lays it out) and bench/katran/bpf/wrap.c
# into KATRAN_BUILD, then runs bench/katran (its own module): lbc, Katran,
# XDP_PASS and lbc_min interleaved call by call on CPU BENCH_CPU, per path,
# over BENCH_ROUNDS rounds; prints lbc ÷ Katran per round (range, median).
#   make bench-katran KATRAN=/path/to/katran [BENCH_ROUNDS=5] [BENCH_CPU=0] [BENCH_ARGS=...]
# BENCH_ARGS passes flags to bench/katran (go run ./bench/katran -h from
# bench/katran lists them: -paths, -lbc-conntrack, -lbc-rings, -fill, -variant for A/B, -loop).
KATRAN_COMMIT = 19f08fec82fb7b5fb14d935a80057bdc0897c8de
KATRAN_BUILD ?= $(or $(TMPDIR),/tmp)/lbc-bench-katran
BENCH_ROUNDS ?= 5
BENCH_CPU ?= 0
CLANG ?= clang
LLC ?= llc
bench-katran:
	@test -n "$(KATRAN)" || { echo "bench-katran: set KATRAN to a checkout of https://github.com/facebookincubator/katran at $(KATRAN_COMMIT): git clone https://github.com/facebookincubator/katran && git -C katran checkout $(KATRAN_COMMIT); make bench-katran KATRAN=\$$PWD/katran"; exit 2; }
	@test -f "$(KATRAN)/katran/lib/bpf/balancer.bpf.c" || { echo "bench-katran: $(KATRAN) is not a Katran checkout (no katran/lib/bpf/balancer.bpf.c)"; exit 2; }
	@got=$$(git -C "$(KATRAN)" rev-parse HEAD 2>/dev/null); test "$$got" = "$(KATRAN_COMMIT)" || { echo "bench-katran: $(KATRAN) is at commit $${got:-unknown (not a git checkout)}, want $(KATRAN_COMMIT): git -C $(KATRAN) checkout $(KATRAN_COMMIT)"; exit 2; }
	@test -z "$$(git -C "$(KATRAN)" status --porcelain -- katran/lib katran/decap)" || { echo "bench-katran: $(KATRAN) has local changes under katran/lib or katran/decap; the comparison is of the commit as published"; exit 2; }
	rm -rf $(KATRAN_BUILD) && mkdir -p $(KATRAN_BUILD)/bpfprog/include $(KATRAN_BUILD)/bpfprog/katran/lib $(KATRAN_BUILD)/bpfprog/bpf
	cp $(KATRAN)/katran/lib/Makefile-bpf $(KATRAN_BUILD)/bpfprog/Makefile
	cp -r $(KATRAN)/katran/lib/bpf $(KATRAN)/katran/lib/linux_includes $(KATRAN_BUILD)/bpfprog/katran/lib/
	cp $(KATRAN)/katran/lib/linux_includes/* $(KATRAN_BUILD)/bpfprog/include/
	$(MAKE) -C $(KATRAN_BUILD)/bpfprog CLANG=$(CLANG) LLC=$(LLC) bpf/balancer.bpf.o
	$(CLANG) -O2 -g -target bpf -I/usr/include/$$(uname -m)-linux-gnu -c bench/katran/bpf/wrap.c -o $(KATRAN_BUILD)/wrap.o
	cd bench/katran && $(GO) run . -katran $(KATRAN_BUILD)/bpfprog/bpf/balancer.bpf.o -wrap $(KATRAN_BUILD)/wrap.o -rounds $(BENCH_ROUNDS) -cpu $(BENCH_CPU) $(BENCH_ARGS)
