// stansummary: summary statistics for one or more Stan CSV files of a
// sampler run, in the style of CmdStan 2.35's bin/stansummary.
//
//   stansummary [options] FILE.csv [FILE.csv ...]
//
// Statistics (all from the Stan library, stan::mcmc::chains<>):
//   Mean, StdDev        chains.mean(i), chains.sd(i) over all post-warmup draws
//   percentiles         chains.quantiles(i, probs) (NaN if any draw is NaN)
//   N_Eff               chains.effective_sample_size(i) (multi-chain ESS)
//   MCSE                StdDev / sqrt(N_Eff)
//   N_Eff/s             N_Eff / total sampling time (sum over files)
//   R_hat               chains.split_potential_scale_reduction(i)
// Every column, sampler diagnostics included, gets all statistics; the
// library returns NaN for ESS and R-hat of constant columns
// (e.g. stepsize__, divergent__ without divergences), and then MCSE,
// N_Eff/s are NaN too.
#include "csv_chains.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

using stanflow::tools::input_error;
using stanflow::tools::starts_with;
using stanflow::tools::ends_with;
using stanflow::tools::trim_copy;

const char* usage_text =
    "Report statistics for one or more Stan CSV files from a HMC sampler "
    "run.\n"
    "Example:  stansummary model_chain_1.csv model_chain_2.csv\n"
    "Options:\n"
    "  -a, --autocorr [n]          Display the chain autocorrelation for the "
    "n-th\n"
    "                              input file, in addition to statistics.\n"
    "  -c, --csv_filename [file]   Write statistics to a CSV file.\n"
    "  -h, --help                  Produce help message, then exit.\n"
    "  -p, --percentiles [values]  Percentiles to report as ordered set of\n"
    "                              comma-separated numbers from (0.1,99.9), "
    "inclusive.\n"
    "                              Default is 5,50,95.\n"
    "  -s, --sig_figs [n]          Significant figures reported. Default is "
    "2.\n"
    "                              Must be an integer from (1, 18), "
    "inclusive.\n"
    "  -i, --include_param [name]  Include the named parameter in the "
    "summary output.\n"
    "                              By default, all parameters in the file "
    "are summarized,\n"
    "                              passing this argument one or more times "
    "will filter\n"
    "                              the output down to just the requested "
    "arguments.\n";

struct options {
  std::vector<double> percentiles{5, 50, 95};
  int sig_figs = 2;
  bool sig_figs_given = false;
  std::string csv_filename;
  int autocorr = 0;  // 0 = none, else 1-based file index
  std::vector<std::string> include;
  std::vector<std::string> files;
  bool help = false;
};

std::string format_g(double x, int digits) {
  if (std::isnan(x))
    return "nan";
  if (std::isinf(x))
    return x > 0 ? "inf" : "-inf";
  std::ostringstream ss;
  ss << std::setprecision(digits) << x;
  return ss.str();
}

std::vector<double> parse_percentiles(const std::string& raw) {
  std::vector<double> out;
  std::string s = trim_copy(raw);
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'')
      && s.back() == s.front())
    s = trim_copy(s.substr(1, s.size() - 2));
  if (s.empty())
    return out;
  std::string token;
  std::istringstream ss(s);
  while (std::getline(ss, token, ',')) {
    std::string t = trim_copy(token);
    if (t.empty())
      throw input_error("Error: invalid --percentiles value '" + raw
                        + "': empty entry.");
    if (ends_with(t, "%"))
      t = trim_copy(t.substr(0, t.size() - 1));
    double v;
    if (!stanflow::tools::parse_number(t, v) || !std::isfinite(v))
      throw input_error("Error: invalid --percentiles value '" + raw
                        + "': '" + t + "' is not a number.");
    if (!(v > 0 && v < 100))
      throw input_error("Error: invalid --percentiles value '" + raw
                        + "': percentiles must be in (0, 100).");
    if (!out.empty() && !(v > out.back()))
      throw input_error("Error: invalid --percentiles value '" + raw
                        + "': percentiles must be strictly increasing.");
    out.push_back(v);
  }
  return out;
}

int parse_int_option(const std::string& name, const std::string& raw) {
  std::string t = trim_copy(raw);
  char* end = nullptr;
  long v = std::strtol(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0')
    throw input_error("Error: invalid value '" + raw + "' for option --"
                      + name + ": expecting an integer.");
  return static_cast<int>(v);
}

options parse_args(int argc, char** argv) {
  options opt;
  // long name -> canonical name
  auto canonical = [](const std::string& n) -> std::string {
    if (n == "percentiles" || n == "p")
      return "percentiles";
    if (n == "sig_figs" || n == "s")
      return "sig_figs";
    if (n == "csv_filename" || n == "csv_file" || n == "c")
      return "csv_filename";
    if (n == "autocorr" || n == "a")
      return "autocorr";
    if (n == "include_param" || n == "i")
      return "include_param";
    if (n == "help" || n == "h")
      return "help";
    return "";
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name, value;
    bool has_value = false;
    if (starts_with(arg, "--") && arg.size() > 2) {
      std::size_t eq = arg.find('=');
      name = arg.substr(2, eq == std::string::npos ? std::string::npos
                                                   : eq - 2);
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        has_value = true;
      }
    } else if (arg.size() >= 2 && arg[0] == '-'
               && !std::isdigit(static_cast<unsigned char>(arg[1]))
               && arg[1] != '.') {
      name = arg.substr(1, 1);
      if (arg.size() > 2) {
        value = arg.substr(2);
        if (starts_with(value, "="))
          value = value.substr(1);
        has_value = true;
      }
    } else {
      opt.files.push_back(arg);
      continue;
    }
    std::string key = canonical(name);
    if (key.empty())
      throw input_error("Error: unrecognized option '" + arg
                        + "'. Use --help for usage.");
    if (key == "help") {
      opt.help = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc)
        throw input_error("Error: option '" + arg + "' needs a value.");
      value = argv[++i];
    }
    if (key == "percentiles") {
      opt.percentiles = parse_percentiles(value);
    } else if (key == "sig_figs") {
      int s = parse_int_option("sig_figs", value);
      if (s < 1 || s > 18)
        throw input_error("Error: --sig_figs must be an integer from 1 to 18,"
                          " found '" + trim_copy(value) + "'.");
      opt.sig_figs = s;
      opt.sig_figs_given = true;
    } else if (key == "csv_filename") {
      opt.csv_filename = trim_copy(value);
      if (opt.csv_filename.empty())
        throw input_error("Error: --csv_filename needs a file name.");
    } else if (key == "autocorr") {
      int a = parse_int_option("autocorr", value);
      if (a < 1)
        throw input_error("Error: --autocorr must be a positive chain"
                          " (file) number.");
      opt.autocorr = a;
    } else if (key == "include_param") {
      std::string v = trim_copy(value);
      if (v.empty())
        throw input_error("Error: --include_param needs a parameter name.");
      opt.include.push_back(v);
    }
  }
  return opt;
}

// ---------------------------------------------------------------- numbers

/// Human formatting with `sig` significant digits: fixed notation for
/// moderate magnitudes (large values shown as whole numbers, e.g. ESS),
/// scientific for very small ones.
std::string format_sig(double x, int sig) {
  if (std::isnan(x))
    return "nan";
  if (std::isinf(x))
    return x > 0 ? "inf" : "-inf";
  if (x == 0) {
    std::ostringstream ss;
    ss << std::fixed << std::setprecision(sig) << 0.0;
    return ss.str();
  }
  // exponent after rounding to sig significant digits
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*e", sig - 1, x);
  int e = std::atoi(std::strchr(buf, 'e') + 1);
  std::ostringstream ss;
  if (e >= sig - 1) {
    if (e >= 15)
      return buf;
    ss << std::fixed << std::setprecision(0) << x;
  } else if (e >= -4) {
    ss << std::fixed << std::setprecision(sig - 1 - e) << x;
  } else {
    return buf;
  }
  std::string s = ss.str();
  if (s == "-0")
    s = "0";
  return s;
}

/// Durations: 2 significant digits, more only for whole seconds >= 10.
std::string format_seconds(double x) {
  if (!std::isfinite(x))
    return format_g(x, 2);
  std::ostringstream ss;
  if (x >= 10)
    ss << std::fixed << std::setprecision(0) << x;
  else if (x >= 1)
    ss << std::fixed << std::setprecision(1) << x;
  else
    return format_sig(x, 2);
  return ss.str();
}

std::string format_total_time(double seconds) {
  if (seconds >= 3600)
    return format_seconds(seconds / 3600) + " hours";
  if (seconds >= 60)
    return format_seconds(seconds / 60) + " minutes";
  return format_seconds(seconds) + " seconds";
}

std::string percentile_label(double p) { return format_g(p, 6) + "%"; }

// ---------------------------------------------------------------- output

struct summary_row {
  std::string name;
  std::vector<double> values;  // Mean MCSE StdDev pcts... N_Eff N_Eff/s R_hat
};

std::vector<std::string> header_lines(const stanflow::tools::chain_set& set) {
  std::vector<std::string> lines;
  const auto& files = set.files;
  std::string model = files[0].metadata.model;
  if (model.empty())
    model = files[0].get("model", "unknown_model");
  lines.push_back("Inference for Stan model: " + model);
  std::ostringstream iters, warm, thin;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const char* sep = i ? "," : "";
    iters << sep << files[i].total_rows();
    warm << sep << files[i].warmup_rows;
    thin << sep << files[i].metadata.thin;
  }
  std::ostringstream l;
  l << files.size() << " chains: each with iter=(" << iters.str()
    << "); warmup=(" << warm.str() << "); thin=(" << thin.str() << "); "
    << set.total_kept() << " iterations saved.";
  lines.push_back(l.str());
  lines.push_back("");
  auto timing = [&](const char* what, bool warmup) {
    std::ostringstream t;
    t << what << " took ";
    double total = 0;
    if (files.size() == 1) {
      double v = warmup ? files[0].warmup_seconds : files[0].sampling_seconds;
      t << format_total_time(v);
      return t.str();
    }
    t << "(";
    for (std::size_t i = 0; i < files.size(); ++i) {
      double v = warmup ? files[i].warmup_seconds : files[i].sampling_seconds;
      total += v;
      t << (i ? ", " : "") << format_seconds(v);
    }
    t << ") seconds, " << format_total_time(total) << " total";
    return t.str();
  };
  lines.push_back(timing("Warmup", true));
  lines.push_back(timing("Sampling", false));
  return lines;
}

std::vector<std::string> footer_lines(const stanflow::tools::chain_set& set) {
  std::vector<std::string> lines;
  const auto& md = set.files[0].metadata;
  std::string algorithm = md.algorithm.empty()
                              ? set.files[0].get("algorithm", "")
                              : md.algorithm;
  std::string engine
      = md.engine.empty() ? set.files[0].get("engine", "") : md.engine;
  if (!algorithm.empty()) {
    if (algorithm == "hmc" && !engine.empty())
      lines.push_back("Samples were drawn using " + algorithm + " with "
                      + engine + ".");
    else
      lines.push_back("Samples were drawn using " + algorithm + ".");
  }
  lines.push_back(
      "For each parameter, N_Eff is a crude measure of effective sample "
      "size,");
  lines.push_back(
      "and R_hat is the potential scale reduction factor on split chains "
      "(at");
  lines.push_back("convergence, R_hat=1).");
  return lines;
}

void print_table(std::ostream& out, const std::vector<std::string>& cols,
                 const std::vector<summary_row>& block1,
                 const std::vector<summary_row>& block2, int sig) {
  const int ncol = static_cast<int>(cols.size());
  std::size_t name_w = 0;
  const std::vector<summary_row>* blocks[2] = {&block1, &block2};
  std::vector<std::vector<std::vector<std::string>>> cells(2);
  std::vector<std::size_t> width(ncol);
  for (int c = 0; c < ncol; ++c)
    width[c] = cols[c].size();
  for (int b = 0; b < 2; ++b) {
    for (const auto& r : *blocks[b]) {
      name_w = std::max(name_w, r.name.size());
      std::vector<std::string> cs;
      for (int c = 0; c < ncol; ++c) {
        std::string s = format_sig(r.values[c], sig);
        width[c] = std::max(width[c], s.size());
        cs.push_back(s);
      }
      cells[b].push_back(cs);
    }
  }
  name_w = std::max<std::size_t>(name_w, 12) + 2;
  out << std::string(name_w, ' ');
  for (int c = 0; c < ncol; ++c)
    out << "  " << std::setw(static_cast<int>(width[c])) << cols[c];
  out << "\n";
  for (int b = 0; b < 2; ++b) {
    if (blocks[b]->empty())
      continue;
    out << "\n";
    for (std::size_t r = 0; r < blocks[b]->size(); ++r) {
      out << std::left << std::setw(static_cast<int>(name_w))
          << (*blocks[b])[r].name << std::right;
      for (int c = 0; c < ncol; ++c)
        out << "  " << std::setw(static_cast<int>(width[c]))
            << cells[b][r][c];
      out << "\n";
    }
  }
}

/// Does CSV column `name` belong to a requested parameter `want`?
bool matches_param(const std::string& name, const std::string& want) {
  if (name == want)
    return true;
  // base name: up to the first '[' or '.' (tuple element separator)
  if (starts_with(name, want) && name.size() > want.size()
      && (name[want.size()] == '[' || name[want.size()] == '.'))
    return true;
  // the user may also give the raw CSV spelling, e.g. theta.1
  std::string pretty = want;
  stan::io::prettify_stan_csv_name(pretty);
  return pretty != want && name == pretty;
}

int run(int argc, char** argv) {
  options opt = parse_args(argc, argv);
  if (opt.help || opt.files.empty()) {
    std::cout << usage_text;
    return 0;
  }
  stanflow::tools::chain_set set = stanflow::tools::read_chain_set(opt.files);
  if (opt.autocorr > static_cast<int>(set.files.size()))
    throw input_error("Error: --autocorr=" + std::to_string(opt.autocorr)
                      + " but only " + std::to_string(set.files.size())
                      + " file(s) were given.");
  stan::mcmc::chains<> chains = set.make_chains();
  const auto& names = set.names();

  // which columns to report
  std::vector<int> block1_idx, block2_idx;
  std::size_t n_leading = 0;  // lp__ and the sampler columns come first
  while (n_leading < names.size() && ends_with(names[n_leading], "__"))
    ++n_leading;
  if (!opt.include.empty()) {
    for (const auto& want : opt.include) {
      bool found = false;
      for (const auto& n : names)
        if (matches_param(n, want))
          found = true;
      if (!found)
        throw input_error("Error: unrecognized parameter '" + want
                          + "' in --include_param.");
    }
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i < n_leading) {
      block1_idx.push_back(static_cast<int>(i));
      continue;
    }
    if (!opt.include.empty()) {
      bool keep = false;
      for (const auto& want : opt.include)
        keep = keep || matches_param(names[i], want);
      if (!keep)
        continue;
    }
    block2_idx.push_back(static_cast<int>(i));
  }

  Eigen::VectorXd probs(static_cast<Eigen::Index>(opt.percentiles.size()));
  for (std::size_t k = 0; k < opt.percentiles.size(); ++k)
    probs(static_cast<Eigen::Index>(k)) = opt.percentiles[k] / 100.0;
  const double sampling_seconds = set.total_sampling_seconds();

  auto compute = [&](int i) {
    summary_row r;
    r.name = names[i];
    double mean = chains.mean(i);
    double sd = chains.sd(i);
    double ess = chains.effective_sample_size(i);
    double rhat = chains.split_potential_scale_reduction(i);
    double mcse = sd / std::sqrt(ess);
    double ess_per_s = ess / sampling_seconds;
    r.values.push_back(mean);
    r.values.push_back(mcse);
    r.values.push_back(sd);
    if (probs.size() > 0) {
      // The library's order-statistic accumulators give meaningless
      // results when NaN draws are present; report NaN instead.
      bool has_nan = chains.samples(i).array().isNaN().any();
      Eigen::VectorXd q = has_nan ? Eigen::VectorXd::Constant(
                                        probs.size(),
                                        std::numeric_limits<double>::quiet_NaN())
                                  : chains.quantiles(i, probs);
      for (Eigen::Index k = 0; k < q.size(); ++k)
        r.values.push_back(q(k));
    }
    r.values.push_back(ess);
    r.values.push_back(ess_per_s);
    r.values.push_back(rhat);
    return r;
  };
  std::vector<summary_row> block1, block2;
  for (int i : block1_idx)
    block1.push_back(compute(i));
  for (int i : block2_idx)
    block2.push_back(compute(i));

  std::vector<std::string> cols{"Mean", "MCSE", "StdDev"};
  for (double p : opt.percentiles)
    cols.push_back(percentile_label(p));
  cols.push_back("N_Eff");
  cols.push_back("N_Eff/s");
  cols.push_back("R_hat");

  std::vector<std::string> head = header_lines(set);
  std::vector<std::string> foot = footer_lines(set);

  // console report
  std::ostream& out = std::cout;
  for (const auto& l : head)
    out << l << "\n";
  out << "\n";
  print_table(out, cols, block1, block2, opt.sig_figs);
  out << "\n";
  for (const auto& l : foot)
    out << l << "\n";

  if (opt.autocorr > 0) {
    int chain = opt.autocorr - 1;
    std::vector<int> shown(block1_idx);
    shown.insert(shown.end(), block2_idx.begin(), block2_idx.end());
    std::vector<Eigen::VectorXd> ac;
    std::size_t name_w = 4;
    for (int i : shown) {
      ac.push_back(chains.autocorrelation(chain, i));
      name_w = std::max(name_w, names[i].size());
    }
    int max_lag = std::min<int>(
        20, static_cast<int>(set.files[chain].kept_rows()) - 1);
    out << "\nDisplaying the autocorrelations for chain " << opt.autocorr
        << " (" << set.files[chain].path << "), lags 0 to " << max_lag
        << ":\n\n";
    out << std::left << std::setw(static_cast<int>(name_w) + 2) << "Lag"
        << std::right;
    for (int lag = 0; lag <= max_lag; ++lag)
      out << std::setw(8) << lag;
    out << "\n";
    for (std::size_t k = 0; k < shown.size(); ++k) {
      out << std::left << std::setw(static_cast<int>(name_w) + 2)
          << names[shown[k]] << std::right;
      for (int lag = 0; lag <= max_lag; ++lag) {
        double v = lag < ac[k].size() ? ac[k](lag)
                                      : std::numeric_limits<double>::quiet_NaN();
        std::ostringstream cell;
        if (std::isfinite(v))
          cell << std::fixed << std::setprecision(3) << v;
        else
          cell << format_g(v, 3);
        out << std::setw(8) << cell.str();
      }
      out << "\n";
    }
  }
  out.flush();

  // CSV file: table first (quoted names), then the report text as comments
  if (!opt.csv_filename.empty()) {
    std::ofstream csv(opt.csv_filename, std::ios::out | std::ios::trunc);
    if (!csv)
      throw input_error("Error: cannot write CSV file '" + opt.csv_filename
                        + "'.");
    int digits = opt.sig_figs_given ? opt.sig_figs : 6;
    csv << "name";
    for (const auto& c : cols)
      csv << "," << c;
    csv << "\n";
    for (const auto* block : {&block1, &block2})
      for (const auto& r : *block) {
        csv << "\"" << r.name << "\"";
        for (double v : r.values)
          csv << "," << format_g(v, digits);
        csv << "\n";
      }
    for (const auto& l : head)
      csv << "# " << l << "\n";
    for (const auto& l : foot)
      csv << "# " << l << "\n";
    csv.close();
    if (!csv)
      throw input_error("Error: failed writing CSV file '" + opt.csv_filename
                        + "'.");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const input_error& e) {
    std::cout.flush();
    std::cerr << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "Error: " << e.what() << std::endl;
    return 1;
  }
}
