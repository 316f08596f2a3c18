#include "arguments.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

namespace stanflow {

namespace {

std::string indent(int depth) { return std::string(2 * depth, ' '); }

std::string format_real(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

value_argument::value_argument(std::string name, std::string help, kind k,
                               std::string default_value,
                               std::string valid_values, validator valid)
    : argument(std::move(name), std::move(help)),
      kind_(k),
      default_text_(std::move(default_value)),
      valid_values_(std::move(valid_values)),
      valid_(std::move(valid)) {
  if (!parse(default_text_))
    throw std::logic_error("bad default for " + this->name());
  default_formatted_ = formatted();
}

bool value_argument::parse(const std::string& text) {
  switch (kind_) {
    case kind::integer: {
      if (text.empty())
        return false;
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno != 0 || *end != '\0')
        return false;
      int_ = v;
      break;
    }
    case kind::real: {
      if (text.empty())
        return false;
      char* end = nullptr;
      errno = 0;
      double v = std::strtod(text.c_str(), &end);
      if (errno != 0 || *end != '\0' || !std::isfinite(v))
        return false;
      real_ = v;
      break;
    }
    case kind::boolean:
      if (text == "1" || text == "true")
        bool_ = true;
      else if (text == "0" || text == "false")
        bool_ = false;
      else
        return false;
      break;
    case kind::string:
      break;
  }
  text_ = text;
  return true;
}

void value_argument::set(const std::string& text) {
  value_argument saved = *this;
  if (!parse(text) || (valid_ && !valid_(*this))) {
    *this = saved;
    throw argument_error(text + " is not a valid value for \"" + name()
                         + "\"\n  Valid values:" + valid_values_);
  }
}

void value_argument::force(const std::string& text) {
  if (!parse(text))
    throw std::logic_error("cannot force " + name() + "=" + text);
}

std::string value_argument::formatted() const {
  switch (kind_) {
    case kind::integer:
      return std::to_string(int_);
    case kind::real:
      return format_real(real_);
    case kind::boolean:
      return bool_ ? "true" : "false";
    case kind::string:
      return text_;
  }
  return text_;
}

bool value_argument::is_default() const {
  return formatted() == default_formatted_;
}

void value_argument::print(std::vector<std::string>& lines, int depth) const {
  lines.push_back(indent(depth) + name() + " = " + formatted()
                  + (is_default() ? " (Default)" : ""));
}

void value_argument::describe(std::vector<std::string>& lines,
                              int depth) const {
  lines.push_back(indent(depth) + name() + "=<value>");
  lines.push_back(indent(depth + 2) + help());
  lines.push_back(indent(depth + 2) + "Valid values:" + valid_values_);
  lines.push_back(indent(depth + 2) + "Defaults to " + default_formatted_);
}

void value_argument::to_json(std::string& out) const {
  switch (kind_) {
    case kind::integer:
      out += std::to_string(int_);
      break;
    case kind::real:
      out += format_real(real_);
      break;
    case kind::boolean:
      out += bool_ ? "true" : "false";
      break;
    case kind::string:
      json_string(out, text_);
      break;
  }
}

argument* category::child(const std::string& name) const {
  for (const auto& c : children_)
    if (c->name() == name)
      return c.get();
  return nullptr;
}

bool category::hidden() const {
  if (!extension_)
    return false;
  for (const auto& c : children_) {
    auto* value = dynamic_cast<const value_argument*>(c.get());
    if (!(value ? value->is_default() : c->hidden()))
      return false;
  }
  return true;
}

void category::print_children(std::vector<std::string>& lines,
                              int depth) const {
  for (const auto& c : children_)
    if (!c->hidden())
      c->print(lines, depth);
}

void category::print(std::vector<std::string>& lines, int depth) const {
  lines.push_back(indent(depth) + name());
  print_children(lines, depth + 1);
}

void category::describe(std::vector<std::string>& lines, int depth) const {
  lines.push_back(indent(depth) + name());
  lines.push_back(indent(depth + 2) + help()
                  + (extension_ ? " (stanflow extension)" : ""));
  for (const auto& c : children_)
    c->describe(lines, depth + 1);
}

void category::to_json(std::string& out) const {
  out += '{';
  bool first = true;
  for (const auto& c : children_) {
    if (c->hidden())
      continue;
    if (!first)
      out += ", ";
    first = false;
    json_string(out, c->name());
    out += ": ";
    c->to_json(out);
  }
  out += '}';
}

category& list_argument::option(const std::string& name,
                                const std::string& help) {
  options_.push_back(std::make_unique<category>(name, help));
  return *options_.back();
}

bool list_argument::has_option(const std::string& option_name) const {
  for (const auto& o : options_)
    if (o->name() == option_name)
      return true;
  return false;
}

void list_argument::choose(const std::string& option_name) {
  for (const auto& o : options_) {
    if (o->name() == option_name) {
      chosen_ = option_name;
      return;
    }
  }
  throw argument_error(option_name + " is not a valid value for \"" + name()
                       + "\"\n  Valid values:" + valid_values());
}

category& list_argument::chosen_option() const {
  for (const auto& o : options_)
    if (o->name() == chosen_)
      return *o;
  throw std::logic_error("no option " + chosen_);
}

std::string list_argument::valid_values() const {
  std::string s;
  for (const auto& o : options_)
    s += (s.empty() ? " " : ", ") + o->name();
  return s;
}

void list_argument::print(std::vector<std::string>& lines, int depth) const {
  lines.push_back(indent(depth) + name() + " = " + chosen_
                  + (chosen_ == default_ ? " (Default)" : ""));
  chosen_option().print(lines, depth + 1);
}

void list_argument::describe(std::vector<std::string>& lines,
                             int depth) const {
  lines.push_back(indent(depth) + name() + "=<list element>");
  lines.push_back(indent(depth + 2) + help());
  lines.push_back(indent(depth + 2) + "Valid values:" + valid_values());
  lines.push_back(indent(depth + 2) + "Defaults to " + default_);
  for (const auto& o : options_)
    o->describe(lines, depth + 1);
}

void list_argument::to_json(std::string& out) const {
  out += "{\"value\": ";
  json_string(out, chosen_);
  const category& c = chosen_option();
  if (!c.children().empty()) {
    out += ", ";
    json_string(out, chosen_);
    out += ": ";
    c.to_json(out);
  }
  out += '}';
}

void parse_tokens(category& root, const std::vector<std::string>& tokens) {
  std::vector<category*> active{&root};
  std::set<std::string> seen_top_level;
  auto* method = dynamic_cast<list_argument*>(root.child("method"));
  for (const std::string& token : tokens) {
    auto eq = token.find('=');
    std::string key = token.substr(0, eq);
    bool has_value = eq != std::string::npos;
    std::string value = has_value ? token.substr(eq + 1) : "";
    // `sample` alone means `method=sample`.
    if (!has_value && method && method->has_option(key)
        && !root.child(key)) {
      value = key;
      key = "method";
      has_value = true;
    }
    argument* match = nullptr;
    size_t level = active.size();
    while (level > 0 && !match) {
      --level;
      argument* candidate = active[level]->child(key);
      if (!candidate)
        continue;
      bool is_category = dynamic_cast<category*>(candidate) != nullptr;
      if (is_category != !has_value)
        continue;
      match = candidate;
    }
    if (!match)
      throw argument_error(token + " is either mistyped or misplaced.");
    if (level == 0) {
      if (!seen_top_level.insert(key).second)
        throw argument_error(token + " is either mistyped or misplaced.");
    }
    active.resize(level + 1);
    if (auto* v = dynamic_cast<value_argument*>(match)) {
      v->set(value);
    } else if (auto* l = dynamic_cast<list_argument*>(match)) {
      l->choose(value);
      active.push_back(l->active_child());
    } else {
      active.push_back(match->active_child());
    }
  }
}

}  // namespace stanflow
