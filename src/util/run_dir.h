// A run's output folder: one writer at a time, one run's checkpoints, no
// leftovers of an interrupted save.
//
// RunDir::open(DIR) creates DIR (and its parents), then takes an exclusive
// flock on DIR/run.lock, held until the RunDir is destroyed (or the process
// ends: the kernel drops the lock with the descriptor). The lock file holds
// one line naming the holder: "pid P on host H, since YYYY-MM-DD HH:MM:SS UTC:
// COMMAND"; a second writer is refused with that line. The file itself stays
// (removing it would let two writers lock two different files).
//
// Under the lock, leftovers of a killed save (write_dir_atomic's temporaries
// "step-NNNNNN.partial-XXXXXX", "final.partial-XXXXXX" and their ".old-XXXXXX"
// twins) are removed and named in notes(). A folder holding another run's
// checkpoints (step-NNNNNN/ or final/) is refused for a new run unless
// `overwrite` (then they are removed, and named in notes()); a run resumed
// from a state inside DIR (DIR/step-NNNNNN or DIR/final) continues there.
#pragma once
#include <string>
#include <vector>

namespace mxrl {

struct RunDirOptions {
  bool overwrite = false;   // a new run may replace another run's checkpoints (they are removed)
  std::string resume_from;  // the training state a resumed run continues from ("" : a new run)
  std::string command;      // recorded in the lock file ("" : this process's command line)
};

class RunDir {
 public:
  RunDir() = default;  // holds nothing
  // Throws mxrl::Error, one line naming DIR: cannot be created or locked,
  // another writer holds it (naming the holder), or it holds another run's
  // checkpoints (without `overwrite`).
  static RunDir open(const std::string& dir, const RunDirOptions& options = {});
  RunDir(RunDir&& o) noexcept;
  RunDir& operator=(RunDir&& o) noexcept;
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;
  ~RunDir();

  bool locked() const { return fd_ >= 0; }
  const std::string& dir() const { return dir_; }
  // What opening did to the folder, one line each (for the front end to print).
  const std::vector<std::string>& notes() const { return notes_; }

  static constexpr const char* kLockFile = "run.lock";

 private:
  int fd_ = -1;
  std::string dir_;
  std::vector<std::string> notes_;
};

// Creates the parent folders of an output file the user named (nothing when
// the path has no parent part). Throws mxrl::Error "PATH: cannot create the
// folder P: <reason>".
void make_parent_dirs(const std::string& path);

}  // namespace mxrl
