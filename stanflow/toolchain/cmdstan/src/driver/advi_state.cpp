#include "advi_state.hpp"

#include <rapidjson/document.h>

#include <fstream>
#include <iomanip>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace stanflow {

namespace {

constexpr const char* format_name = "stanflow-advi-state";
constexpr int format_version = 1;

void write_array(std::ostream& out, const Eigen::MatrixXd& values) {
  out << '[';
  // row-major, so that a Cholesky factor reads row by row
  for (Eigen::Index i = 0; i < values.rows(); ++i)
    for (Eigen::Index j = 0; j < values.cols(); ++j)
      out << (i + j > 0 ? ", " : "") << values(i, j);
  out << ']';
}

void write_string(std::ostream& out, const std::string& text) {
  out << '"';
  for (char c : text) {
    if (c == '"' || c == '\\')
      out << '\\' << c;
    else if (c == '\n')
      out << "\\n";
    else
      out << c;
  }
  out << '"';
}

class reader {
 public:
  explicit reader(const std::string& path) : path_(path) {
    std::ifstream in(path);
    if (!in.is_open())
      throw std::invalid_argument("checkpoint load: cannot open \"" + path
                                  + "\"");
    std::stringstream text;
    text << in.rdbuf();
    doc_.Parse<rapidjson::kParseFullPrecisionFlag>(text.str().c_str());
    if (doc_.HasParseError() || !doc_.IsObject())
      fail("", "is not a JSON object");
    if (!doc_.HasMember("format") || !doc_["format"].IsString()
        || std::string(doc_["format"].GetString()) != format_name)
      fail("format", std::string("must be \"") + format_name + "\"");
    if (integer("version") != format_version)
      fail("version", "must be " + std::to_string(format_version));
  }

  const rapidjson::Value& member(const std::string& name) const {
    if (!doc_.HasMember(name.c_str()))
      fail(name, "is missing");
    return doc_[name.c_str()];
  }

  std::string text(const std::string& name) const {
    const auto& v = member(name);
    if (!v.IsString())
      fail(name, "must be a string");
    return v.GetString();
  }

  long long integer(const std::string& name) const {
    const auto& v = member(name);
    if (!v.IsInt64())
      fail(name, "must be an integer");
    return v.GetInt64();
  }

  double real(const std::string& name) const {
    const auto& v = member(name);
    if (!v.IsNumber())
      fail(name, "must be a number");
    return v.GetDouble();
  }

  std::optional<double> optional_real(const std::string& name) const {
    if (member(name).IsNull())
      return std::nullopt;
    return real(name);
  }

  Eigen::MatrixXd matrix(const std::string& name, Eigen::Index rows,
                         Eigen::Index cols) const {
    const auto& v = member(name);
    if (!v.IsArray() || v.Size() != static_cast<rapidjson::SizeType>(rows * cols))
      fail(name, "must be an array of " + std::to_string(rows * cols)
                     + " numbers");
    Eigen::MatrixXd values(rows, cols);
    for (Eigen::Index i = 0; i < rows; ++i)
      for (Eigen::Index j = 0; j < cols; ++j) {
        const auto& x = v[static_cast<rapidjson::SizeType>(i * cols + j)];
        if (!x.IsNumber() || !std::isfinite(x.GetDouble()))
          fail(name, "must hold finite numbers only");
        values(i, j) = x.GetDouble();
      }
    return values;
  }

  /** A full-rank factor must be lower triangular, as Stan's family checks. */
  void lower_triangular(const std::string& name, const Eigen::MatrixXd& m) const {
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = i + 1; j < m.cols(); ++j)
        if (m(i, j) != 0)
          fail(name, "must be lower triangular (row by row)");
  }

  [[noreturn]] void fail(const std::string& field,
                         const std::string& problem) const {
    throw std::invalid_argument("checkpoint load: \"" + path_ + "\""
                                + (field.empty() ? "" : ", field " + field)
                                + " " + problem);
  }

 private:
  std::string path_;
  rapidjson::Document doc_;
};

}  // namespace

void write_advi_state(std::ostream& out, const advi_state& state) {
  auto require_finite = [](const char* name, bool finite) {
    if (!finite)
      throw std::domain_error(std::string("ADVI's state is not finite (field ")
                              + name
                              + "): the optimisation diverged, no state saved");
  };
  require_finite("mu", state.mu.allFinite());
  require_finite("scale", state.scale.allFinite());
  require_finite("history_mu", state.history_mu.allFinite());
  require_finite("history_scale", state.history_scale.allFinite());
  std::ios::fmtflags flags = out.flags();
  std::streamsize precision = out.precision();
  out << std::setprecision(17);
  out << "{\"format\": ";
  write_string(out, format_name);
  out << ", \"version\": " << format_version << ", \"algorithm\": ";
  write_string(out, state.algorithm);
  out << ", \"model\": ";
  write_string(out, state.model);
  out << ", \"dimension\": " << state.mu.size()
      << ", \"iteration\": " << state.iteration << ", \"eta\": " << state.eta
      << ", \"elbo\": ";
  if (state.elbo)
    out << *state.elbo;
  else
    out << "null";
  out << ",\n\"mu\": ";
  write_array(out, state.mu);
  out << ",\n\"scale\": ";
  write_array(out, state.scale);
  out << ",\n\"history_mu\": ";
  write_array(out, state.history_mu);
  out << ",\n\"history_scale\": ";
  write_array(out, state.history_scale);
  out << ",\n\"rng\": ";
  write_string(out, state.rng);
  out << "}\n";
  out.flags(flags);
  out.precision(precision);
}

advi_state read_advi_state(const std::string& path) {
  reader in(path);
  advi_state state;
  state.algorithm = in.text("algorithm");
  if (state.algorithm != "meanfield" && state.algorithm != "fullrank")
    in.fail("algorithm", "must be \"meanfield\" or \"fullrank\"");
  state.model = in.text("model");
  long long dim = in.integer("dimension");
  if (dim < 0)
    in.fail("dimension", "must be >= 0");
  state.iteration = in.integer("iteration");
  if (state.iteration < 1)
    in.fail("iteration", "must be >= 1");
  state.eta = in.real("eta");
  if (!(state.eta > 0))
    in.fail("eta", "must be positive");
  state.elbo = in.optional_real("elbo");
  Eigen::Index cols = state.algorithm == "meanfield" ? 1 : dim;
  state.mu = in.matrix("mu", dim, 1);
  state.scale = in.matrix("scale", dim, cols);
  state.history_mu = in.matrix("history_mu", dim, 1);
  state.history_scale = in.matrix("history_scale", dim, cols);
  if (cols > 1) {
    in.lower_triangular("scale", state.scale);
    in.lower_triangular("history_scale", state.history_scale);
  }
  if ((state.history_mu.array() < 0).any())
    in.fail("history_mu", "must be >= 0 (squared gradients)");
  if ((state.history_scale.array() < 0).any())
    in.fail("history_scale", "must be >= 0 (squared gradients)");
  state.rng = in.text("rng");
  return state;
}

}  // namespace stanflow
