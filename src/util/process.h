// Running another program from mxrl: the report's plotting script, the vLLM
// adapter's Python (the report's engine part, `mxrl diverge`). The child gets
// MXRL_BIN set to this mxrl binary (unless already set), so that scripts call
// this same build of the CLI back.
#pragma once
#include <string>
#include <vector>

namespace mxrl {

// Runs argv[0] (a path) with its arguments and waits: its exit status; 127
// when it could not be started, 128 when it did not exit normally.
int run_program(const std::vector<std::string>& argv);

// Replaces this process with argv[0] (a path) and its arguments; returns only
// by throwing mxrl::Error, naming the program and why it could not start.
[[noreturn]] void exec_program(const std::vector<std::string>& argv);

}  // namespace mxrl
