/**
 * \file errors.h
 * \brief The exceptions every stage and demo throws, each with the process exit code
 *        a demo returns for it.
 */
#pragma once

#include <stdexcept>
#include <string>

namespace fa {

/// Exit codes shared by every demo, so scripts can tell failures apart.
enum ExitCode : int {
  kExitPassed = 0,        ///< ran, and the result matched the reference (or was not checked)
  kExitCheckFailed = 1,   ///< ran, but the result did not match the reference
  kExitBadInput = 2,      ///< bad command line, shape or input file
  kExitNoResources = 3,   ///< the problem does not fit in the device's free memory
  kExitCudaError = 4,     ///< a CUDA runtime call or kernel launch failed
  kExitNoGpu = 77,        ///< no CUDA GPU present (77 is CTest's usual "skipped")
};

/// Base class: an error with a message meant for the user and an exit code.
class Error : public std::runtime_error {
 public:
  /// \param message for the user; \param code the exit code a demo returns.
  Error(const std::string& message, ExitCode code) : std::runtime_error(message), code_(code) {}
  /// The exit code a demo returns for this error.
  ExitCode exit_code() const { return code_; }

 private:
  ExitCode code_;
};

/// A bad command-line flag or value.
class UsageError : public Error {
 public:
  /// \param m the message for the user.
  explicit UsageError(const std::string& m) : Error(m, kExitBadInput) {}
};

/// A shape, head dimension or input file the program cannot accept.
class InputError : public Error {
 public:
  /// \param m the message for the user.
  explicit InputError(const std::string& m) : Error(m, kExitBadInput) {}
};

/// The problem needs more device memory than is free.
class ResourceError : public Error {
 public:
  /// \param m the message for the user.
  explicit ResourceError(const std::string& m) : Error(m, kExitNoResources) {}
};

/// A CUDA runtime call or kernel launch returned an error.
class CudaError : public Error {
 public:
  /// \param m the message for the user.
  explicit CudaError(const std::string& m) : Error(m, kExitCudaError) {}
};

/// No CUDA device is available to this process.
class NoGpuError : public Error {
 public:
  /// \param m the message for the user.
  explicit NoGpuError(const std::string& m) : Error(m, kExitNoGpu) {}
};

}  // namespace fa
