// The text form of fault plans: every key, every error message, comments and
// separators, and the round trip through to_string().
#include <gtest/gtest.h>

#include <string>

#include "emulator/fault/fault_plan.h"

namespace softverbs::fault {
namespace {

Plan parse_ok(std::string_view text) {
  Plan plan;
  std::string error;
  EXPECT_TRUE(parse_plan(text, plan, error)) << text << ": " << error;
  return plan;
}

Rule only_rule(std::string_view text) {
  const Plan plan = parse_ok(text);
  EXPECT_EQ(plan.rules.size(), 1u) << text;
  return plan.rules.empty() ? Rule{Action::kDrop} : plan.rules[0];
}

std::string parse_error(std::string_view text) {
  Plan plan;
  plan.seed = 99;  // must survive a failed parse
  std::string error;
  EXPECT_FALSE(parse_plan(text, plan, error)) << text;
  EXPECT_EQ(plan, Plan{.seed = 99}) << "a failed parse changed the plan: " << text;
  return error;
}

TEST(FaultPlanText, EmptyTextIsAnEmptyPlanWithSeedOne) {
  EXPECT_EQ(parse_ok(""), Plan{});
  EXPECT_EQ(parse_ok("  \n ; ;\n# only a comment\n"), Plan{});
}

TEST(FaultPlanText, TheDocumentedExampleParses) {
  const Plan plan = parse_ok("seed=7; drop:p=0.05; dup:p=0.01; reorder:p=0.05,depth=3; corrupt:p=0.001");
  EXPECT_EQ(plan.seed, 7u);
  ASSERT_EQ(plan.rules.size(), 4u);
  EXPECT_EQ(plan.rules[0], (Rule{.action = Action::kDrop, .probability = 0.05}));
  EXPECT_EQ(plan.rules[1], (Rule{.action = Action::kDuplicate, .probability = 0.01}));
  EXPECT_EQ(plan.rules[2],
            (Rule{.action = Action::kReorder, .probability = 0.05, .reorder_depth = 3}));
  EXPECT_EQ(plan.rules[3], (Rule{.action = Action::kCorrupt, .probability = 0.001}));
}

TEST(FaultPlanText, DropTheThirdPacketOfOneQp) {
  EXPECT_EQ(only_rule("drop:qp=0x12,nth=3"),
            (Rule{.action = Action::kDrop, .qpn = 0x12, .nth = 3}));
}

TEST(FaultPlanText, ActionsHaveShortNamesAndDefaults) {
  EXPECT_EQ(only_rule("drop").action, Action::kDrop);
  EXPECT_EQ(only_rule("dup").action, Action::kDuplicate);
  EXPECT_EQ(only_rule("duplicate").action, Action::kDuplicate);
  EXPECT_EQ(only_rule("reorder").action, Action::kReorder);
  EXPECT_EQ(only_rule("delay:ms=1").action, Action::kDelay);
  EXPECT_EQ(only_rule("corrupt").action, Action::kCorrupt);
  EXPECT_EQ(only_rule("rnr").action, Action::kRnr);
  EXPECT_EQ(only_rule("rnr:dir=rx,op=SEND_FIRST,p=0.2").action, Action::kRnr);
  EXPECT_EQ(only_rule("DROP:").action, Action::kDrop);
  const Rule rule = only_rule("drop");
  EXPECT_EQ(rule.direction, Direction::kBoth);
  EXPECT_FALSE(rule.qpn);
  EXPECT_FALSE(rule.opcode);
  EXPECT_EQ(rule.probability, 1.0);
  EXPECT_EQ(rule.nth, 0u);
  EXPECT_EQ(rule.limit, 0u);
}

TEST(FaultPlanText, DirKey) {
  EXPECT_EQ(only_rule("drop:dir=tx").direction, Direction::kTx);
  EXPECT_EQ(only_rule("drop:dir=rx").direction, Direction::kRx);
  EXPECT_EQ(only_rule("drop:dir=both").direction, Direction::kBoth);
  EXPECT_EQ(only_rule("drop:dir=TX").direction, Direction::kTx);
}

TEST(FaultPlanText, QpKeyIsDecimalOrHexUpTo24Bits) {
  EXPECT_EQ(only_rule("drop:qp=18").qpn, 18u);
  EXPECT_EQ(only_rule("drop:qp=0x12").qpn, 0x12u);
  EXPECT_EQ(only_rule("drop:qp=0XABCDEF").qpn, 0xabcdefu);
  EXPECT_EQ(only_rule("drop:qp=0xffffff").qpn, 0xffffffu);
  EXPECT_EQ(only_rule("drop:qp=0").qpn, 0u);
}

TEST(FaultPlanText, OpKeyTakesNamesInSeveralSpellingsOrNumbers) {
  EXPECT_EQ(only_rule("drop:op=SEND_ONLY").opcode, 0x04);
  EXPECT_EQ(only_rule("drop:op=RC_SEND_ONLY").opcode, 0x04);
  EXPECT_EQ(only_rule("drop:op=send-only").opcode, 0x04);
  EXPECT_EQ(only_rule("drop:op=RDMA_WRITE_FIRST").opcode, 0x06);
  EXPECT_EQ(only_rule("drop:op=WRITE_FIRST").opcode, 0x06);
  EXPECT_EQ(only_rule("drop:op=ACKNOWLEDGE").opcode, 0x11);
  EXPECT_EQ(only_rule("drop:op=READ_REQUEST").opcode, 0x0c);
  EXPECT_EQ(only_rule("drop:op=RDMA_READ_REQUEST").opcode, 0x0c);
  EXPECT_EQ(only_rule("drop:op=READ_RESPONSE_LAST").opcode, 0x0f);
  EXPECT_EQ(only_rule("drop:op=SEND_ONLY_WITH_IMMEDIATE").opcode, 0x05);
  EXPECT_EQ(only_rule("drop:op=SEND_ONLY_IMM").opcode, 0x05);
  EXPECT_EQ(only_rule("drop:op=SEND_LAST_INV").opcode, 0x16);
  EXPECT_EQ(only_rule("drop:op=CMP_SWAP").opcode, 0x13);
  EXPECT_EQ(only_rule("drop:op=UC_SEND_ONLY").opcode, 0x24);
  EXPECT_EQ(only_rule("drop:op=UD_SEND_ONLY").opcode, 0x64);
  EXPECT_EQ(only_rule("drop:op=17").opcode, 0x11);
  EXPECT_EQ(only_rule("drop:op=0x64").opcode, 0x64);
  EXPECT_EQ(only_rule("drop:op=255").opcode, 0xff);
}

TEST(FaultPlanText, ProbabilityNthAndLimitKeys) {
  EXPECT_EQ(only_rule("drop:p=0").probability, 0.0);
  EXPECT_EQ(only_rule("drop:p=1").probability, 1.0);
  EXPECT_EQ(only_rule("drop:p=0.25").probability, 0.25);
  EXPECT_EQ(only_rule("drop:p=1e-3").probability, 0.001);
  EXPECT_EQ(only_rule("drop:nth=1").nth, 1u);
  EXPECT_EQ(only_rule("drop:nth=0x10").nth, 16u);
  EXPECT_EQ(only_rule("drop:limit=5").limit, 5u);
}

TEST(FaultPlanText, DelayKeysInMillisecondsOrMicroseconds) {
  EXPECT_EQ(only_rule("delay:ms=5").delay_ns, 5'000'000u);
  EXPECT_EQ(only_rule("delay:ms=2.5").delay_ns, 2'500'000u);
  EXPECT_EQ(only_rule("delay:us=1500").delay_ns, 1'500'000u);
  EXPECT_EQ(only_rule("delay:us=0.5").delay_ns, 500u);
  EXPECT_EQ(only_rule("delay:ms=0").delay_ns, 0u);
  const Rule ms = only_rule("delay:ms=1,jitter_ms=0.5");
  EXPECT_EQ(ms.delay_ns, 1'000'000u);
  EXPECT_EQ(ms.jitter_ns, 500'000u);
  const Rule us = only_rule("delay:jitter_us=20");
  EXPECT_EQ(us.delay_ns, 0u);
  EXPECT_EQ(us.jitter_ns, 20'000u);
}

TEST(FaultPlanText, DepthKey) {
  EXPECT_EQ(only_rule("reorder").reorder_depth, 1u);
  EXPECT_EQ(only_rule("reorder:depth=3").reorder_depth, 3u);
}

TEST(FaultPlanText, EveryKeyInOneRule) {
  EXPECT_EQ(only_rule("delay:dir=rx,qp=0x42,op=SEND_FIRST,p=0.5,nth=2,limit=9,us=10,jitter_us=3"),
            (Rule{.action = Action::kDelay,
                  .direction = Direction::kRx,
                  .qpn = 0x42,
                  .opcode = 0x00,
                  .probability = 0.5,
                  .nth = 2,
                  .limit = 9,
                  .delay_ns = 10'000,
                  .jitter_ns = 3'000}));
}

TEST(FaultPlanText, SeedIsDecimalOrHex) {
  EXPECT_EQ(parse_ok("seed=0").seed, 0u);
  EXPECT_EQ(parse_ok("seed=42").seed, 42u);
  EXPECT_EQ(parse_ok("seed = 0xdeadbeef").seed, 0xdeadbeefu);
  EXPECT_EQ(parse_ok("SEED=18446744073709551615").seed, UINT64_MAX);
}

TEST(FaultPlanText, SeparatorsCommentsAndSpaces) {
  const Plan plan = parse_ok(
      "# lossy link\n"
      "seed=3   # replayable\n"
      "drop : p = 0.1 , dir = tx ;; dup:nth=2\n"
      "\n"
      "  corrupt:limit=1  # once\n");
  EXPECT_EQ(plan.seed, 3u);
  ASSERT_EQ(plan.rules.size(), 3u);
  EXPECT_EQ(plan.rules[0],
            (Rule{.action = Action::kDrop, .direction = Direction::kTx, .probability = 0.1}));
  EXPECT_EQ(plan.rules[1], (Rule{.action = Action::kDuplicate, .nth = 2}));
  EXPECT_EQ(plan.rules[2], (Rule{.action = Action::kCorrupt, .limit = 1}));
}

TEST(FaultPlanText, RulesKeepTheirOrder) {
  const Plan plan = parse_ok("corrupt;delay:ms=1;reorder;dup;drop");
  ASSERT_EQ(plan.rules.size(), 5u);
  EXPECT_EQ(plan.rules[0].action, Action::kCorrupt);
  EXPECT_EQ(plan.rules[1].action, Action::kDelay);
  EXPECT_EQ(plan.rules[2].action, Action::kReorder);
  EXPECT_EQ(plan.rules[3].action, Action::kDuplicate);
  EXPECT_EQ(plan.rules[4].action, Action::kDrop);
}

TEST(FaultPlanText, ToStringWritesOnlyWhatDiffersFromTheDefaults) {
  EXPECT_EQ(to_string(Plan{}), "seed=1");
  EXPECT_EQ(to_string(parse_ok("seed=7; drop:p=0.05; reorder:depth=3; delay:ms=1.5")),
            "seed=7; drop:p=0.05; reorder:depth=3; delay:us=1500");
  EXPECT_EQ(to_string(parse_ok("drop:qp=18,op=ACKNOWLEDGE,dir=rx")),
            "seed=1; drop:dir=rx,qp=0x12,op=RC_ACKNOWLEDGE");
}

TEST(FaultPlanText, ToStringRoundTrips) {
  const char* const texts[] = {
      "",
      "seed=7; drop:p=0.05; dup:p=0.01; reorder:p=0.05,depth=3; corrupt:p=0.001",
      "drop:qp=0x12,nth=3",
      ("seed=0xffffffffffffffff; delay:dir=tx,qp=5,op=UD_SEND_ONLY_IMM,p=0.1,nth=4,limit=2,"
       "us=0.001,jitter_ms=3.25"),
      "delay:jitter_us=7; reorder:dir=rx,depth=4000000000,limit=1; corrupt:op=200,p=0.3333333333333333",
      "delay:ms=3600000",
      "seed=3; rnr:p=0.15; rnr:op=SEND_ONLY,nth=2",
  };
  for (const char* text : texts) {
    const Plan plan = parse_ok(text);
    EXPECT_EQ(parse_ok(to_string(plan)), plan) << text << " -> " << to_string(plan);
  }
}

TEST(FaultPlanText, NamesOfActionsAndDirections) {
  EXPECT_STREQ(to_string(Action::kDuplicate), "dup");
  EXPECT_STREQ(to_string(Action::kCorrupt), "corrupt");
  EXPECT_STREQ(to_string(Action::kRnr), "rnr");
  EXPECT_STREQ(to_string(Direction::kRx), "rx");
  EXPECT_STREQ(to_string(Direction::kBoth), "both");
}

// Every error message, word for word: each names the rule, what is wrong and
// how to write it.
struct ErrorCase {
  const char* text;
  const char* message;
};

class FaultPlanErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(FaultPlanErrors, SaySomethingUseful) {
  EXPECT_EQ(parse_error(GetParam().text), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    EveryMessage, FaultPlanErrors,
    ::testing::Values(
        ErrorCase{"drp:p=0.1",
                  "fault rule 'drp:p=0.1': unknown action 'drp' (use drop, dup, reorder, "
                  "delay, corrupt, rnr)"},
        ErrorCase{":p=0.1",
                  "fault rule ':p=0.1': no action (start the rule with drop, dup, reorder, "
                  "delay, corrupt or rnr)"},
        ErrorCase{"rnr:dir=tx",
                  "fault rule 'rnr:dir=tx': rnr answers SENDs where they arrive (leave dir "
                  "out, or write dir=rx)"},
        ErrorCase{"drop:prob=0.1",
                  "fault rule 'drop:prob=0.1': unknown key 'prob' (use dir, qp, op, p, nth, "
                  "limit, ms, us, jitter_ms, jitter_us, depth)"},
        ErrorCase{"drop:p0.1", "fault rule 'drop:p0.1': 'p0.1' is not key=value (write e.g. p=0.1)"},
        ErrorCase{"drop:p=0.1,p=0.2",
                  "fault rule 'drop:p=0.1,p=0.2': key 'p' given twice (give each key once)"},
        ErrorCase{"drop:nth=", "fault rule 'drop:nth=': key 'nth' has no value (write nth=VALUE)"},
        ErrorCase{"drop:dir=up", "fault rule 'drop:dir=up': dir must be tx, rx or both, not 'up'"},
        ErrorCase{"drop:qp=0x1000000",
                  "fault rule 'drop:qp=0x1000000': qp must be a QP number from 0 to 0xffffff, "
                  "decimal or 0x hex, not '0x1000000'"},
        ErrorCase{"drop:qp=twelve",
                  "fault rule 'drop:qp=twelve': qp must be a QP number from 0 to 0xffffff, "
                  "decimal or 0x hex, not 'twelve'"},
        ErrorCase{"drop:op=SND",
                  "fault rule 'drop:op=SND': unknown opcode 'SND' (use a name such as SEND_ONLY, "
                  "RDMA_WRITE_FIRST, ACKNOWLEDGE, READ_REQUEST, READ_RESPONSE_LAST, "
                  "UD_SEND_ONLY, or a number from 0 to 255)"},
        ErrorCase{"drop:op=256",
                  "fault rule 'drop:op=256': unknown opcode '256' (use a name such as SEND_ONLY, "
                  "RDMA_WRITE_FIRST, ACKNOWLEDGE, READ_REQUEST, READ_RESPONSE_LAST, "
                  "UD_SEND_ONLY, or a number from 0 to 255)"},
        ErrorCase{"drop:p=1.5",
                  "fault rule 'drop:p=1.5': p must be a probability from 0 to 1 (e.g. p=0.05), "
                  "not '1.5'"},
        ErrorCase{"drop:p=-0.1",
                  "fault rule 'drop:p=-0.1': p must be a probability from 0 to 1 (e.g. "
                  "p=0.05), not '-0.1'"},
        ErrorCase{"drop:p=nan",
                  "fault rule 'drop:p=nan': p must be a probability from 0 to 1 (e.g. p=0.05), "
                  "not 'nan'"},
        ErrorCase{"drop:p=5%",
                  "fault rule 'drop:p=5%': p must be a probability from 0 to 1 (e.g. p=0.05), "
                  "not '5%'"},
        ErrorCase{"drop:nth=0",
                  "fault rule 'drop:nth=0': nth must be a whole number from 1 (nth=1: the first "
                  "matching packet), not '0'"},
        ErrorCase{"drop:nth=-2",
                  "fault rule 'drop:nth=-2': nth must be a whole number from 1 (nth=1: the first "
                  "matching packet), not '-2'"},
        ErrorCase{"drop:limit=0",
                  "fault rule 'drop:limit=0': limit must be a whole number from 1 (leave it out "
                  "for no limit), not '0'"},
        ErrorCase{"delay:ms=-1",
                  "fault rule 'delay:ms=-1': ms must be a number of milliseconds from 0 to "
                  "3600000 (e.g. ms=2.5), not '-1'"},
        ErrorCase{"delay:us=1e10",
                  "fault rule 'delay:us=1e10': us must be a number of microseconds from 0 to "
                  "3600000000 (e.g. us=2.5), not '1e10'"},
        ErrorCase{"delay:jitter_ms=soon",
                  "fault rule 'delay:jitter_ms=soon': jitter_ms must be a number of milliseconds "
                  "from 0 to 3600000 (e.g. jitter_ms=2.5), not 'soon'"},
        ErrorCase{"delay:ms=1,jitter_us=inf",
                  "fault rule 'delay:ms=1,jitter_us=inf': jitter_us must be a number of "
                  "microseconds from 0 to 3600000000 (e.g. jitter_us=2.5), not 'inf'"},
        ErrorCase{"delay:ms=1,us=5",
                  "fault rule 'delay:ms=1,us=5': give the delay once, with either ms or us"},
        ErrorCase{"delay:ms=1,jitter_ms=1,jitter_us=5",
                  "fault rule 'delay:ms=1,jitter_ms=1,jitter_us=5': give the jitter once, with "
                  "either jitter_ms or jitter_us"},
        ErrorCase{"delay", "fault rule 'delay': delay needs a duration (add ms=N or us=N, e.g. "
                           "delay:ms=5)"},
        ErrorCase{"delay:p=0.5",
                  "fault rule 'delay:p=0.5': delay needs a duration (add ms=N or us=N, e.g. "
                  "delay:ms=5)"},
        ErrorCase{"drop:ms=5",
                  "fault rule 'drop:ms=5': 'ms' applies only to delay (write e.g. delay:ms=1)"},
        ErrorCase{"dup:jitter_us=5",
                  "fault rule 'dup:jitter_us=5': 'jitter_us' applies only to delay (write e.g. "
                  "delay:jitter_us=1)"},
        ErrorCase{"drop:depth=2",
                  "fault rule 'drop:depth=2': 'depth' applies only to reorder (write e.g. "
                  "reorder:depth=3)"},
        ErrorCase{"reorder:depth=0",
                  "fault rule 'reorder:depth=0': depth must be a whole number from 1 (how many "
                  "later frames overtake), not '0'"},
        ErrorCase{"reorder:depth=4294967296",
                  "fault rule 'reorder:depth=4294967296': depth must be a whole number from 1 "
                  "(how many later frames overtake), not '4294967296'"},
        ErrorCase{"seed=abc",
                  "fault plan 'seed=abc': seed must be a whole number from 0, decimal or 0x hex "
                  "(e.g. seed=7)"},
        ErrorCase{"seed=-1",
                  "fault plan 'seed=-1': seed must be a whole number from 0, decimal or 0x hex "
                  "(e.g. seed=7)"},
        ErrorCase{"seed=1; seed=2", "fault plan 'seed=2': seed given twice (give it once)"},
        // The first bad rule is reported, wherever it is.
        ErrorCase{"seed=1\ndrop:p=0.1 # fine\ndup:nth=x",
                  "fault rule 'dup:nth=x': nth must be a whole number from 1 (nth=1: the first "
                  "matching packet), not 'x'"}));

}  // namespace
}  // namespace softverbs::fault
