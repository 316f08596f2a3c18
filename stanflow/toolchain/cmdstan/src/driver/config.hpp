// The CmdStan 2.35 argument tree with its defaults and valid ranges.
#ifndef STANFLOW_DRIVER_CONFIG_HPP
#define STANFLOW_DRIVER_CONFIG_HPP

#include "arguments.hpp"

#include <memory>
#include <string>
#include <vector>

namespace stanflow {

/** A parsed command line: the argument tree plus lookup by path. */
class config {
 public:
  explicit config(bool threaded);
  /** Parse the command-line tokens (argv[1:]); throws argument_error. */
  void parse(const std::vector<std::string>& tokens);

  /** Look up a value by a '/'-separated path; list options are path steps. */
  value_argument& value(const std::string& path) const;
  list_argument& list(const std::string& path) const;
  long long integer(const std::string& path) const {
    return value(path).as_int();
  }
  double real(const std::string& path) const { return value(path).as_real(); }
  bool flag(const std::string& path) const { return value(path).as_bool(); }
  const std::string& text(const std::string& path) const {
    return value(path).as_string();
  }
  /** The chosen method (`sample`, `optimize`, ...). */
  const std::string& method() const;

  /** The tree as CmdStan prints it, one entry per line, no prefix. */
  std::vector<std::string> lines() const;
  /** Every argument with its help text and valid values (`help-all`). */
  std::vector<std::string> help_lines() const;
  /** The tree as a JSON object (for save_cmdstan_config). */
  std::string json() const;

 private:
  argument* find(const std::string& path) const;
  std::unique_ptr<category> root_;
};

}  // namespace stanflow
#endif
