#include "util/process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace mxrl {

namespace {
// MXRL_BIN = /proc/self/exe, unless the environment names one already.
void export_self_as_mxrl_bin() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) self[n] = 0, setenv("MXRL_BIN", self, 0);
}

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}
}  // namespace

int run_program(const std::vector<std::string>& argv) {
  std::vector<char*> args = c_argv(argv);
  const pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    export_self_as_mxrl_bin();
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

void exec_program(const std::vector<std::string>& argv) {
  std::vector<char*> args = c_argv(argv);
  export_self_as_mxrl_bin();
  execv(args[0], args.data());
  fail("cannot run {}: {}", argv.at(0), std::strerror(errno));
}

}  // namespace mxrl
