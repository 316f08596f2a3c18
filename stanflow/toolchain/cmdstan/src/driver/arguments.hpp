// The CmdStan argument tree: typed values, categories and lists, parsed from
// `name=value` / bare `name` tokens and printed as CmdStan prints its config.
#ifndef STANFLOW_DRIVER_ARGUMENTS_HPP
#define STANFLOW_DRIVER_ARGUMENTS_HPP

#include <functional>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stanflow {

/** Raised for any command-line error; the message is printed verbatim. */
struct argument_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class category;

/** A node of the argument tree. */
class argument {
 public:
  explicit argument(std::string name, std::string help)
      : name_(std::move(name)), help_(std::move(help)) {}
  virtual ~argument() = default;
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  /** Print the node as `indent` levels deep (two spaces per level). */
  virtual void print(std::vector<std::string>& lines, int depth) const = 0;
  /** Describe the node and its valid values for `help-all`. */
  virtual void describe(std::vector<std::string>& lines, int depth) const = 0;
  /** Append a JSON rendering of the node's value to `out`. */
  virtual void to_json(std::string& out) const = 0;
  /** The category whose children are active after this node is matched. */
  virtual category* active_child() { return nullptr; }
  /** Whether the node is left out of the printed config and its JSON. */
  virtual bool hidden() const { return false; }

 private:
  std::string name_;
  std::string help_;
};

/** A leaf holding one typed value, given as `name=value`. */
class value_argument : public argument {
 public:
  enum class kind { integer, real, boolean, string };
  using validator = std::function<bool(const value_argument&)>;

  value_argument(std::string name, std::string help, kind k,
                 std::string default_value, std::string valid_values,
                 validator valid);

  /** Parse and validate `text`; throws argument_error on failure. */
  void set(const std::string& text);
  /** Overwrite the value without validation (for values the driver fixes). */
  void force(const std::string& text);
  bool is_default() const;
  kind type() const { return kind_; }
  long long as_int() const { return int_; }
  double as_real() const { return real_; }
  bool as_bool() const { return bool_; }
  const std::string& as_string() const { return text_; }
  std::string formatted() const;
  void print(std::vector<std::string>& lines, int depth) const override;
  void describe(std::vector<std::string>& lines, int depth) const override;
  void to_json(std::string& out) const override;

 private:
  bool parse(const std::string& text);
  kind kind_;
  std::string default_text_;
  std::string valid_values_;
  validator valid_;
  std::string text_;
  long long int_ = 0;
  double real_ = 0;
  bool bool_ = false;
  std::string default_formatted_;
};

/**
 * A named group of arguments, given as a bare token. A stanflow extension
 * (not in CmdStan) is printed only when one of its values is set, so that
 * the config of a run that does not use it reads exactly as CmdStan's.
 */
class category : public argument {
 public:
  using argument::argument;
  /** Mark the group as a stanflow extension. */
  void mark_extension() { extension_ = true; }
  bool hidden() const override;
  template <typename T, typename... Args>
  T& add(Args&&... args) {
    children_.push_back(std::make_unique<T>(std::forward<Args>(args)...));
    return static_cast<T&>(*children_.back());
  }
  argument* child(const std::string& name) const;
  const std::vector<std::unique_ptr<argument>>& children() const {
    return children_;
  }
  void print(std::vector<std::string>& lines, int depth) const override;
  void print_children(std::vector<std::string>& lines, int depth) const;
  void describe(std::vector<std::string>& lines, int depth) const override;
  void to_json(std::string& out) const override;
  category* active_child() override { return this; }

 private:
  std::vector<std::unique_ptr<argument>> children_;
  bool extension_ = false;
};

/** A choice among categories, given as `name=option`. */
class list_argument : public argument {
 public:
  list_argument(std::string name, std::string help, std::string default_option)
      : argument(std::move(name), std::move(help)),
        default_(std::move(default_option)),
        chosen_(default_) {}
  category& option(const std::string& name, const std::string& help);
  bool has_option(const std::string& option_name) const;
  void choose(const std::string& option_name);
  const std::string& chosen() const { return chosen_; }
  category& chosen_option() const;
  std::string valid_values() const;
  void print(std::vector<std::string>& lines, int depth) const override;
  void describe(std::vector<std::string>& lines, int depth) const override;
  void to_json(std::string& out) const override;
  category* active_child() override { return &chosen_option(); }

 private:
  std::string default_;
  std::string chosen_;
  std::vector<std::unique_ptr<category>> options_;
};

/**
 * Parse `tokens` into `root`. A token is matched by the innermost active
 * argument that knows its name, else by the enclosing ones; top-level
 * arguments may appear only once. `method=` may be omitted before a method.
 */
void parse_tokens(category& root, const std::vector<std::string>& tokens);

}  // namespace stanflow
#endif
