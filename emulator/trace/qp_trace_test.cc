// A QP's trace files: the three parts, the requester's lines that wait for
// the completer, a file read while still mapped, and a path that cannot be
// written.
#include "emulator/trace/qp_trace.h"
#include "emulator/trace/trace_line.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace softverbs::trace {
namespace {

class QpTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("qp-trace-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string stem() const { return (dir_ / "prog.1.qp1").string(); }
  // What a reader sees: the file up to its first zero byte.
  std::string read(const char* part) const {
    std::ifstream in(stem() + "." + part, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.substr(0, text.find('\0'));
  }
  uintmax_t size_of(const char* part) const {
    return std::filesystem::file_size(stem() + "." + part);
  }

  std::filesystem::path dir_;
};

TEST_F(QpTraceTest, EachPartWritesItsOwnFileCutToItsEventsWhenFinished) {
  QpTrace trace(stem());
  trace.event(Stream::kCompleter, "timeout 3 retries-left=6\n");
  trace.event(Stream::kResponder, "recv RC_SEND_ONLY 0\n");
  trace.event(Stream::kResponder, "complete SUCCESS\n");
  // Readable before the end, as a killed process leaves it.
  EXPECT_EQ(read("completer"), "timeout 3 retries-left=6\n");
  EXPECT_GT(size_of("completer"), read("completer").size());
  trace.finish();
  EXPECT_EQ(read("responder"), "recv RC_SEND_ONLY 0\ncomplete SUCCESS\n");
  EXPECT_EQ(size_of("responder"), read("responder").size());
  EXPECT_FALSE(std::filesystem::exists(stem() + ".requester"));  // no event, no file
}

TEST_F(QpTraceTest, RequesterLinesAreWrittenOnceAcknowledged) {
  QpTrace trace(stem());
  trace.request_event(10, "send A 10\n");
  trace.request_event(11, "send B 11\n");
  trace.request_event(12, "send C 12\n");
  EXPECT_EQ(read("requester"), "");
  trace.settle_requests_before(12);
  EXPECT_EQ(read("requester"), "send A 10\nsend B 11\n");
  trace.finish();  // what is left is written at the end
  EXPECT_EQ(read("requester"), "send A 10\nsend B 11\nsend C 12\n");
}

TEST_F(QpTraceTest, GoingBackForgetsWhatWasSentPastThePsnGoneBackTo) {
  QpTrace trace(stem());
  trace.request_event(5, "send 5\n");
  trace.request_event(6, "send 6\n");
  trace.request_event(6, "fault drop tx 6\n");
  trace.request_event(7, "send 7\n");
  trace.request_event(8, "send 8\n");
  trace.abandon_requests_after(6);
  EXPECT_EQ(read("requester"), "send 5\nsend 6\nfault drop tx 6\n");
  trace.request_event(6, "send 6\n");
  trace.request_event(7, "send 7\n");
  trace.settle_requests_before(8);
  trace.finish();
  EXPECT_EQ(read("requester"), "send 5\nsend 6\nfault drop tx 6\nsend 6\nsend 7\n");
}

// A stream never has all its requests settled at once: the lines written
// must still be let go of.
TEST_F(QpTraceTest, AStreamThatNeverSettlesEverythingKeepsItsLinesInOrder) {
  QpTrace trace(stem());
  std::string expected;
  for (uint32_t psn = 0; psn < 5000; ++psn) {
    const std::string line = "send " + std::to_string(psn) + "\n";
    trace.request_event(psn, line);
    expected += line;
    if (psn >= 8) trace.settle_requests_before(psn - 8);  // eight always in flight
  }
  trace.finish();
  EXPECT_EQ(read("requester"), expected);
}

TEST_F(QpTraceTest, PsnsCompareAcrossTheWrap) {
  QpTrace trace(stem());
  trace.request_event(0xfffffe, "send 16777214\n");
  trace.request_event(0xffffff, "send 16777215\n");
  trace.request_event(0, "send 0\n");
  trace.request_event(1, "send 1\n");
  trace.abandon_requests_after(0);
  trace.finish();
  EXPECT_EQ(read("requester"), "send 16777214\nsend 16777215\nsend 0\n");
}

TEST_F(QpTraceTest, GrowsPastItsFirstMapping) {
  QpTrace trace(stem());
  std::string expected;
  for (uint32_t i = 0; i < 20000; ++i) {
    const std::string line = "recv RC_SEND_ONLY " + std::to_string(i) + "\n";
    trace.event(Stream::kResponder, line);
    expected += line;
  }
  EXPECT_EQ(read("responder"), expected);
  trace.finish();
  EXPECT_EQ(size_of("responder"), expected.size());
}

TEST(TraceLine, WordsNumbersSettingsAndJoinedNumbers) {
  TraceLine line;
  line.word("run").word("RC_SEND_FIRST").number(12).joined('+', 3).setting("retries-left", 6);
  EXPECT_EQ(line.finished(), "run RC_SEND_FIRST 12+3 retries-left=6\n");
  TraceLine long_line;
  for (int i = 0; i < 100; ++i) long_line.word("word");
  EXPECT_EQ(long_line.finished().size(), 160u);  // cut, newline kept
  EXPECT_EQ(long_line.finished().back(), '\n');
}

TEST_F(QpTraceTest, AFileThatCannotBeWrittenIsSaidOnceAndTracesNoFurther) {
  QpTrace trace((dir_ / "missing" / "prog.1.qp1").string());
  ::testing::internal::CaptureStderr();
  trace.event(Stream::kResponder, "recv 1\n");
  trace.event(Stream::kResponder, "recv 2\n");
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("cannot write the trace"), std::string::npos) << said;
  EXPECT_EQ(said.find("cannot write", said.find("cannot write") + 1), std::string::npos) << said;
}

}  // namespace
}  // namespace softverbs::trace
