#include "driver.hpp"

#include <stan/io/ends_with.hpp>

#include <stan/io/dump.hpp>
#include <stan/io/empty_var_context.hpp>
#include <stan/io/json/json_data.hpp>
#include <stan/io/stan_csv_reader.hpp>
#include <stan/version.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

namespace stanflow {

namespace {

const char* const partial_suffix = ".partial";

size_t extension_start(const std::string& path) {
  auto slash = path.find_last_of('/');
  auto dot = path.find_last_of('.');
  bool has_ext
      = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  return has_ext ? dot : path.size();
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string utc_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(
      std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%d %H:%M:%S") << " UTC";
  return os.str();
}

}  // namespace

output_files::~output_files() {
  if (committed_)
    return;
  for (const auto& p : paths_)
    std::remove((p + partial_suffix).c_str());
}

std::unique_ptr<std::ofstream> output_files::open(const std::string& path) {
  auto stream = std::make_unique<std::ofstream>(path + partial_suffix);
  if (!stream->is_open())
    throw std::invalid_argument("Cannot open output file \"" + path + "\"");
  paths_.push_back(path);
  return stream;
}

void output_files::commit() {
  for (const auto& p : paths_) {
    if (std::rename((p + partial_suffix).c_str(), p.c_str()) != 0)
      throw std::runtime_error("Cannot move output into place: \"" + p + "\"");
  }
  committed_ = true;
}

std::string file_for_chain(const std::string& path, unsigned int id) {
  return with_suffix(path, "_" + std::to_string(id)
                               + path.substr(extension_start(path)));
}

std::string with_suffix(const std::string& path, const std::string& suffix) {
  return path.substr(0, extension_start(path)) + suffix;
}

context_ptr read_var_context(const std::string& path,
                             stan::callbacks::logger& logger) {
  if (path.empty())
    return std::make_shared<stan::io::empty_var_context>();
  std::ifstream in(path);
  if (!in.is_open() || !file_exists(path))
    throw std::invalid_argument("Can't open specified file, \"" + path + "\"");
  if (stan::io::ends_with(".json", path))
    return std::make_shared<stan::json::json_data>(in);
  logger.warn("Warning: file \"" + path
              + "\" is not a .json file; reading it as R dump format "
                "(deprecated).");
  return std::make_shared<stan::io::dump>(in);
}

std::vector<context_ptr> read_chain_contexts(const std::string& path,
                                             size_t num_chains,
                                             unsigned int id,
                                             stan::callbacks::logger& logger) {
  std::vector<context_ptr> contexts;
  if (num_chains == 1 || path.empty()) {
    context_ptr shared = read_var_context(path, logger);
    contexts.assign(num_chains, shared);
    return contexts;
  }
  context_ptr fallback;
  for (size_t i = 0; i < num_chains; ++i) {
    std::string own = file_for_chain(path, id + i);
    if (file_exists(own)) {
      contexts.push_back(read_var_context(own, logger));
    } else {
      if (!fallback)
        fallback = read_var_context(path, logger);
      contexts.push_back(fallback);
    }
  }
  return contexts;
}

init_spec parse_init(const std::string& init) {
  char* end = nullptr;
  double radius = std::strtod(init.c_str(), &end);
  if (!init.empty() && *end == '\0') {
    if (!(radius >= 0))
      throw std::invalid_argument("init radius must be >= 0, found " + init);
    return {radius, ""};
  }
  return {2.0, init};
}

void write_header(run_context& ctx, stan::callbacks::writer& writer,
                  unsigned int chain_id) {
  writer("stan_version_major = " + std::string(stan::MAJOR_VERSION));
  writer("stan_version_minor = " + std::string(stan::MINOR_VERSION));
  writer("stan_version_patch = " + std::string(stan::PATCH_VERSION));
  writer("model = " + ctx.model.model_name());
  writer("start_datetime = " + utc_now());
  value_argument& id = ctx.cfg.value("id");
  std::string saved = id.as_string();
  id.force(std::to_string(chain_id));
  for (const std::string& line : ctx.cfg.lines())
    writer(line);
  id.force(saved);
  for (const std::string& line : ctx.model.model_compile_info())
    writer(line);
}

csv_writer open_csv(run_context& ctx, const std::string& path,
                    unsigned int chain_id) {
  auto stream = ctx.outputs.open(path);
  if (ctx.sig_figs > -1)
    *stream << std::setprecision(ctx.sig_figs);
  csv_writer writer(std::move(stream), "# ");
  write_header(ctx, writer, chain_id);
  return writer;
}

csv_writer null_csv() {
  return csv_writer(std::unique_ptr<std::ofstream>(), "# ");
}

Eigen::MatrixXd read_parameter_draws(const stan::model::model_base& model,
                                     const std::string& csv_path) {
  std::ifstream in(csv_path);
  if (!in.is_open() || !file_exists(csv_path))
    throw std::invalid_argument("Can't open specified file, \"" + csv_path
                                + "\"");
  std::stringstream messages;
  stan::io::stan_csv csv = stan::io::stan_csv_reader::parse(in, &messages);
  std::vector<std::string> names;
  model.constrained_param_names(names, false, false);
  Eigen::MatrixXd draws(csv.samples.rows(), names.size());
  for (size_t j = 0; j < names.size(); ++j) {
    std::string pretty = names[j];
    stan::io::prettify_stan_csv_name(pretty);
    size_t col = 0;
    while (col < csv.header.size() && csv.header[col] != pretty)
      ++col;
    if (col == csv.header.size())
      throw std::invalid_argument("Mismatch between model and fitted "
                                  "parameters csv file \""
                                  + csv_path + "\": no column for parameter "
                                  + names[j]);
    draws.col(j) = csv.samples.col(col);
  }
  return draws;
}

}  // namespace stanflow
