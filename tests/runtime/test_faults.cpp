// Fault specs (runtime/faults/fault_spec.hpp): every kind parses with its keys and defaults,
// every mistake is refused naming the spec, the key and what is allowed, the layout checks name
// what the engine cannot do, and the engine TOML's [faults] table and --fault feed the same
// EngineArgs.
#include <catch2/catch.hpp>

#include "runtime/config/engine_args.hpp"
#include "runtime/error.hpp"
#include "runtime/faults/fault_spec.hpp"

using namespace troupe;

TEST_CASE("every fault kind parses with its keys and defaults", "[faults]") {
  FaultSpec f = parse_fault_spec("kill-worker:rank=1,step=20");
  CHECK(f.kind == FaultKind::kill_worker);
  CHECK(f.rank == 1);
  CHECK(f.step == 20);
  CHECK(f.text == "kill-worker:rank=1,step=20");
  f = parse_fault_spec("kill-executor");  // rank 0, step 1
  CHECK(f.kind == FaultKind::kill_executor);
  CHECK(f.rank == 0);
  CHECK(f.step == 1);
  CHECK(parse_fault_spec("freeze:step=3").kind == FaultKind::freeze);
  f = parse_fault_spec("drop:message=result,rank=2,step=7");
  CHECK(f.kind == FaultKind::drop);
  CHECK(f.message == FaultMessage::result);
  f = parse_fault_spec("delay:message=execute,step=4,ms=250");
  CHECK(f.message == FaultMessage::execute);
  CHECK(f.ms == 250);
  CHECK(f.on_rank());
  f = parse_fault_spec("delay:message=grant,step=2,ms=300");  // the head's cache manager
  CHECK(f.message == FaultMessage::grant);
  CHECK(f.step == 2);
  CHECK_FALSE(f.on_rank());
  CHECK(parse_fault_spec("ucx-fail:rank=0,step=5").kind == FaultKind::ucx_fail);
  f = parse_fault_spec("refuse-kv:step=5,count=3");
  CHECK(f.kind == FaultKind::refuse_kv);
  CHECK(f.count == 3);
  CHECK_FALSE(f.on_rank());
  f = parse_fault_spec("slow:rank=1,factor=2.5");
  CHECK(f.factor == 2.5);
  CHECK(f.step == 1);
  CHECK(std::string(fault_kind_name(FaultKind::ucx_fail)) == "ucx-fail");
}

TEST_CASE("a bad fault spec is refused naming the spec, the key and what is allowed", "[faults]") {
  struct Case {
    const char* spec;
    std::vector<const char*> says;
  };
  const std::vector<Case> cases = {
      {"explode:rank=1", {"fault 'explode:rank=1'", "unknown kind 'explode'", "kill-worker"}},
      {"kill-worker:", {"nothing after ':'"}},
      {"kill-worker:rank", {"'rank' is not key=value"}},
      {"kill-worker:rank=1,rank=2", {"'rank' given twice"}},
      {"kill-worker:ms=5", {"kill-worker takes no key 'ms'", "allowed: rank, step"}},
      {"kill-worker:rank=-1", {"rank = '-1'", "an integer in 0 .."}},
      {"kill-worker:step=0", {"step = '0'", "1 .."}},
      {"kill-worker:step=3x", {"step = '3x'"}},
      {"drop:rank=0", {"drop needs message"}},
      {"drop:message=plan", {"message = 'plan'", "execute", "result"}},
      {"delay:message=execute", {"delay needs ms"}},
      {"delay:message=execute,ms=0", {"ms = '0'", "1 .. 600000"}},
      {"delay:message=plan,ms=5", {"message = 'plan'", "execute", "result", "or grant"}},
      {"drop:message=grant", {"message = 'grant'", "execute", "result"}},
      {"delay:message=grant,rank=1,ms=5", {"message = grant", "give no rank"}},
      {"slow:rank=0", {"slow needs factor"}},
      {"slow:factor=1", {"factor = '1'", "> 1"}},
      {"refuse-kv:count=0", {"count = '0'"}},
      {"refuse-kv:rank=1", {"refuse-kv takes no key 'rank'", "allowed: count, step"}},
  };
  for (const Case& c : cases) {
    INFO(c.spec);
    std::string error;
    try {
      (void)parse_fault_spec(c.spec);
    } catch (const Error& e) {
      error = e.what();
    }
    REQUIRE_FALSE(error.empty());
    for (const char* s : c.says) CHECK_THAT(error, Catch::Contains(s));
  }
}

TEST_CASE("fault specs are checked against the engine's layout", "[faults]") {
  const FaultLayout one{1, 1, false}, tp2{2, 1, true}, pp2{1, 2, true}, tp2pp2{2, 2, true};
  CHECK_NOTHROW(check_fault_layout(parse_fault_specs({"kill-executor", "freeze", "slow:factor=2",
                                                      "refuse-kv:step=2", "drop:message=result"}),
                                   one));
  CHECK_THROWS_WITH(check_fault_layout({parse_fault_spec("kill-worker")}, one),
                    Catch::Contains("no worker process to kill") &&
                        Catch::Contains("use kill-executor"));
  CHECK_THROWS_WITH(check_fault_layout({parse_fault_spec("kill-worker:rank=2")}, tp2),
                    Catch::Contains("rank 2 is outside [0, 2)") &&
                        Catch::Contains("tensor_parallel_size 2 x pipeline_parallel_size 1"));
  CHECK_NOTHROW(check_fault_layout({parse_fault_spec("kill-worker:rank=1")}, tp2));
  CHECK_THROWS_WITH(check_fault_layout({parse_fault_spec("ucx-fail")}, tp2),
                    Catch::Contains("pipeline_parallel_size is 1"));
  CHECK_NOTHROW(check_fault_layout({parse_fault_spec("ucx-fail:rank=0")}, pp2));
  CHECK_THROWS_WITH(check_fault_layout({parse_fault_spec("ucx-fail:rank=1")}, pp2),
                    Catch::Contains("last pipeline stage") && Catch::Contains("ranks 0 .. 0"));
  CHECK_NOTHROW(check_fault_layout({parse_fault_spec("ucx-fail:rank=1")}, tp2pp2));
  CHECK_THROWS_WITH(check_fault_layout({parse_fault_spec("ucx-fail:rank=2")}, tp2pp2),
                    Catch::Contains("ranks 0 .. 1"));
  // refuse-kv acts on the head: no rank to check.
  CHECK_NOTHROW(check_fault_layout({parse_fault_spec("refuse-kv:step=3")}, one));
}

TEST_CASE("the engine TOML's [faults] table and --fault set the same EngineArgs", "[faults]") {
  const auto c = parse_engine_toml(R"(
model = "m"
[faults]
inject = ["kill-executor:step=3", "slow:factor=2"]
max_executor_restarts = 1
execute_timeout = 5.5
)",
                                   "engine.toml");
  CHECK(c.engine.fault == std::vector<std::string>{"kill-executor:step=3", "slow:factor=2"});
  CHECK(c.engine.max_executor_restarts == 1);
  CHECK(c.engine.execute_timeout == 5.5);

  EngineArgs a;
  set_engine_arg(a, "--fault", "kill-executor:step=3", nullptr);
  CHECK(a.fault == std::vector<std::string>{"kill-executor:step=3"});

  CHECK_THROWS_WITH(parse_engine_toml("model = \"m\"\n[faults]\ninject = [\"kill:step=3\"]\n",
                                      "engine.toml"),
                    Catch::Contains("engine.toml") && Catch::Contains("unknown kind 'kill'"));
  CHECK_THROWS_WITH(parse_engine_toml("model = \"m\"\n[faults]\nrestarts = 2\n", "engine.toml"),
                    Catch::Contains("engine.toml:3") && Catch::Contains("'faults.restarts'") &&
                        Catch::Contains("allowed: inject, max_executor_restarts"));
  CHECK_THROWS_WITH(
      parse_engine_toml("model = \"m\"\n[faults]\nmax_executor_restarts = 101\n", "engine.toml"),
      Catch::Contains("max_executor_restarts") && Catch::Contains("0 .. 100"));
  CHECK_THROWS_WITH(parse_engine_toml("model = \"m\"\nexecute_timeout = 0\n", "engine.toml"),
                    Catch::Contains("execute_timeout") && Catch::Contains("> 0"));
}
