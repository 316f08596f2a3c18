// Shared reading of Stan CSV sample files for the auxiliary programs
// `stansummary` and `diagnose`.
//
// The comment header and the column header are read with the Stan library's
// own `stan::io::stan_csv_reader` (metadata, column names, name
// prettification `theta.1.2` -> `theta[1,2]`).  The body (draw rows and the
// trailing timing comments) is read here, because the library reader
//  - reads numbers with `operator>>`, which cannot read the `nan`, `inf`
//    and `-inf` tokens Stan writes (they would silently become 0), and
//  - only warns (instead of failing) on ragged rows, and
//  - reads `save_warmup = true` (the CmdStan >= 2.33 spelling) as false.
// All draws of all files are then put into a `stan::mcmc::chains<>` object,
// whose estimators (mean, sd, quantiles, ESS, split R-hat) the tools use.
#ifndef STANFLOW_TOOLS_CSV_CHAINS_HPP
#define STANFLOW_TOOLS_CSV_CHAINS_HPP

#include <stan/io/stan_csv_reader.hpp>
#include <stan/mcmc/chains.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stanflow {
namespace tools {

/// Error in the input files; the message is meant for the user.
class input_error : public std::runtime_error {
 public:
  explicit input_error(const std::string& msg) : std::runtime_error(msg) {}
};

inline std::string trim_copy(const std::string& s) {
  const char* ws = " \t\r\n\f\v";
  std::size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos)
    return "";
  std::size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size()
         && s.compare(0, prefix.size(), prefix) == 0;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size()
         && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Parses a complete token as a double; accepts nan, -nan, inf, -inf,
/// infinity (any case).  Returns false if the token is not a number.
inline bool parse_number(const std::string& token, double& value) {
  std::string t = trim_copy(token);
  if (t.empty())
    return false;
  const char* begin = t.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(begin, &end);
  if (end == begin || *end != '\0')
    return false;
  // strtod reports overflow with ERANGE and +-HUGE_VAL (= inf), which is the
  // value we want; underflow gives a denormal or 0, also fine.
  if (std::isnan(v))
    v = std::numeric_limits<double>::quiet_NaN();  // drop the sign of -nan
  value = v;
  return true;
}

/// One Stan CSV file.
struct chain_file {
  std::string path;
  stan::io::stan_csv_metadata metadata;  // as read by the Stan library
  std::map<std::string, std::string> config;  // flattened `key = value`
  std::vector<std::string> names;  // prettified column names
  Eigen::MatrixXd draws;           // every data row, warmup rows included
  long warmup_rows = 0;            // leading rows that are saved warmup
  double warmup_seconds = 0;       // from the "Elapsed Time" comments
  double sampling_seconds = 0;

  long total_rows() const { return static_cast<long>(draws.rows()); }
  long kept_rows() const { return total_rows() - warmup_rows; }

  /// Header value of `key` (last occurrence), or `fallback` if absent.
  std::string get(const std::string& key,
                  const std::string& fallback = "") const {
    auto it = config.find(key);
    return it == config.end() ? fallback : it->second;
  }
  long get_long(const std::string& key, long fallback) const {
    auto it = config.find(key);
    if (it == config.end())
      return fallback;
    char* end = nullptr;
    long v = std::strtol(it->second.c_str(), &end, 10);
    return end == it->second.c_str() ? fallback : v;
  }
  bool get_bool(const std::string& key, bool fallback) const {
    auto it = config.find(key);
    if (it == config.end())
      return fallback;
    const std::string& v = it->second;
    if (v == "1" || v == "true" || v == "TRUE" || v == "True")
      return true;
    if (v == "0" || v == "false" || v == "FALSE" || v == "False")
      return false;
    return fallback;
  }
};

/// Parses one `# ... Elapsed Time ...` line; adds the seconds to the
/// warmup or sampling total.
inline void parse_timing_comment(const std::string& line, chain_file& f) {
  bool warmup = line.find("(Warm-up)") != std::string::npos;
  bool sampling = line.find("(Sampling)") != std::string::npos;
  if (!warmup && !sampling)
    return;
  std::size_t sec = line.find(" seconds");
  if (sec == std::string::npos)
    return;
  // the number is the last whitespace/colon separated token before "seconds"
  std::string before = line.substr(0, sec);
  std::size_t start = before.find_last_of(" \t:#");
  std::string token
      = start == std::string::npos ? before : before.substr(start + 1);
  double v;
  if (!parse_number(token, v) || !std::isfinite(v))
    return;
  if (warmup)
    f.warmup_seconds += v;
  else
    f.sampling_seconds += v;
}

/// Reads one Stan CSV file.  Throws input_error on any problem.
inline chain_file read_chain_file(const std::string& path) {
  chain_file f;
  f.path = path;

  std::ifstream file(path, std::ios::in | std::ios::binary);
  if (!file)
    throw input_error("Error: cannot open file '" + path + "'.");
  std::string content((std::istreambuf_iterator<char>(file)),
                      std::istreambuf_iterator<char>());
  if (content.find('\r') != std::string::npos)
    content.erase(std::remove(content.begin(), content.end(), '\r'),
                  content.end());
  if (content.empty())
    throw input_error("Error: file '" + path + "' is empty.");
  if (content[0] != '#')
    throw input_error("Error: file '" + path
                      + "' is not a Stan CSV file (it does not start with"
                        " '#' comment lines).");

  // Flattened key = value view of the leading comment block (later keys win).
  std::size_t header_line_no = 1;
  {
    std::istringstream lines(content);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty() || line[0] != '#')
        break;
      ++header_line_no;
      std::string body = trim_copy(line.substr(1));
      std::size_t eq = body.find('=');
      if (eq == std::string::npos)
        continue;
      std::string key = trim_copy(body.substr(0, eq));
      std::string value = trim_copy(body.substr(eq + 1));
      const std::string dflt = "(Default)";
      if (ends_with(value, dflt))
        value = trim_copy(value.substr(0, value.size() - dflt.size()));
      if (!key.empty())
        f.config[key] = value;
    }
  }

  std::istringstream in(content);
  std::stringstream reader_messages;
  stan::io::stan_csv_reader::read_metadata(in, f.metadata, &reader_messages);
  if (in.peek() == std::char_traits<char>::eof())
    throw input_error("Error: file '" + path
                      + "' is not a Stan CSV file (no column header line).");
  std::vector<std::string> header;
  bool header_ok = false;
  try {
    header_ok = stan::io::stan_csv_reader::read_header(
        in, header, &reader_messages, true);
  } catch (const std::exception&) {
    header_ok = false;
  }
  if (!header_ok || header.empty())
    throw input_error("Error: file '" + path
                      + "' is not a Stan CSV file (no column header line).");
  for (const auto& name : header)
    if (name.empty())
      throw input_error("Error: file '" + path
                        + "' has an empty column name in its header.");
  if (std::find(header.begin(), header.end(), "lp__") == header.end())
    throw input_error("Error: file '" + path
                      + "' is not a Stan CSV file from the sampler (no lp__"
                        " column).");
  f.names = header;

  // The library reader misreads "save_warmup = true"; use our own view.
  f.metadata.save_warmup = f.get_bool("save_warmup", f.metadata.save_warmup);
  long thin = f.get_long("thin", static_cast<long>(f.metadata.thin));
  if (thin < 1)
    thin = 1;
  f.metadata.thin = static_cast<size_t>(thin);

  // Body: draws, adaptation comments, timing comments.
  const std::size_t ncol = header.size();
  std::vector<double> values;
  std::size_t nrows = 0;
  long adaptation_row = -1;
  std::string line;
  std::size_t line_no = header_line_no;  // header line is header_line_no
  std::vector<double> row(ncol);
  while (std::getline(in, line)) {
    ++line_no;
    std::string t = trim_copy(line);
    if (t.empty())
      continue;
    if (t[0] == '#') {
      if (t.find("Adaptation terminated") != std::string::npos
          && adaptation_row < 0)
        adaptation_row = static_cast<long>(nrows);
      parse_timing_comment(t, f);
      continue;
    }
    std::size_t col = 0;
    std::size_t pos = 0;
    while (true) {
      std::size_t comma = t.find(',', pos);
      std::string token = t.substr(
          pos, comma == std::string::npos ? std::string::npos : comma - pos);
      if (col >= ncol) {
        col = ncol + 1;
        break;
      }
      if (!parse_number(token, row[col])) {
        std::ostringstream msg;
        msg << "Error: file '" << path << "', line " << line_no
            << ": cannot read '" << trim_copy(token) << "' as a number"
            << " (column " << header[col] << ").";
        throw input_error(msg.str());
      }
      ++col;
      if (comma == std::string::npos)
        break;
      pos = comma + 1;
    }
    if (col != ncol) {
      std::ostringstream msg;
      msg << "Error: file '" << path << "', line " << line_no
          << ": expected " << ncol << " values, found "
          << (std::count(t.begin(), t.end(), ',') + 1) << ".";
      throw input_error(msg.str());
    }
    values.insert(values.end(), row.begin(), row.end());
    ++nrows;
  }

  f.draws.resize(static_cast<Eigen::Index>(nrows),
                 static_cast<Eigen::Index>(ncol));
  for (std::size_t r = 0; r < nrows; ++r)
    for (std::size_t c = 0; c < ncol; ++c)
      f.draws(r, c) = values[r * ncol + c];

  // Saved warmup rows come first: ceil(num_warmup / thin) of them.  If the
  // adaptation block was seen after some rows, that position is the truth.
  f.warmup_rows = 0;
  if (f.metadata.save_warmup) {
    long num_warmup
        = f.get_long("num_warmup", static_cast<long>(f.metadata.num_warmup));
    if (num_warmup < 0)
      num_warmup = 0;
    long w = (num_warmup + thin - 1) / thin;
    if (adaptation_row > 0)
      w = adaptation_row;
    f.warmup_rows = std::min<long>(w, static_cast<long>(nrows));
  }
  return f;
}

/// All files of one run.
struct chain_set {
  std::vector<chain_file> files;

  const std::vector<std::string>& names() const { return files.at(0).names; }
  long total_kept() const {
    long n = 0;
    for (const auto& f : files)
      n += f.kept_rows();
    return n;
  }
  double total_sampling_seconds() const {
    double s = 0;
    for (const auto& f : files)
      s += f.sampling_seconds;
    return s;
  }
  double total_warmup_seconds() const {
    double s = 0;
    for (const auto& f : files)
      s += f.warmup_seconds;
    return s;
  }
  int index(const std::string& name) const {
    const auto& n = names();
    auto it = std::find(n.begin(), n.end(), name);
    return it == n.end() ? -1 : static_cast<int>(it - n.begin());
  }

  /// The post-warmup draws as a Stan library chains object (one chain per
  /// file, warmup rows already removed).
  stan::mcmc::chains<> make_chains() const {
    stan::mcmc::chains<> chains(names());
    for (const auto& f : files) {
      Eigen::MatrixXd kept
          = f.draws.bottomRows(static_cast<Eigen::Index>(f.kept_rows()));
      chains.add(kept);
    }
    return chains;
  }
};

/// Reads all files, checks that they belong together.  Throws input_error.
inline chain_set read_chain_set(const std::vector<std::string>& paths) {
  if (paths.empty())
    throw input_error("Error: no Stan CSV files given.");
  chain_set set;
  for (const auto& p : paths) {
    chain_file f = read_chain_file(p);
    if (f.kept_rows() <= 0)
      throw input_error("Error: file '" + p
                        + "' contains no post-warmup draws.");
    if (!set.files.empty()) {
      const auto& first = set.files.front();
      if (f.names != first.names) {
        std::ostringstream msg;
        msg << "Error: file '" << p << "' has different columns than '"
            << first.path << "'";
        if (f.names.size() != first.names.size()) {
          msg << " (" << f.names.size() << " vs " << first.names.size()
              << " columns)";
        } else {
          for (std::size_t i = 0; i < f.names.size(); ++i)
            if (f.names[i] != first.names[i]) {
              msg << " (column " << (i + 1) << " is '" << f.names[i]
                  << "' instead of '" << first.names[i] << "')";
              break;
            }
        }
        msg << "; all files must come from the same model.";
        throw input_error(msg.str());
      }
    }
    set.files.push_back(std::move(f));
  }
  return set;
}

}  // namespace tools
}  // namespace stanflow

#endif
