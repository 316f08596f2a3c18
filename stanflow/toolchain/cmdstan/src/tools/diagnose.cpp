// diagnose: checks the Stan CSV files of a sampler run for the usual HMC
// problems, in the style of CmdStan 2.35's bin/diagnose.
//
//   diagnose FILE.csv [FILE.csv ...]
//
// Checks (post-warmup draws only):
//   treedepth   transitions with treedepth__ >= max_depth (from the header)
//   divergences transitions with divergent__ != 0
//   E-BFMI      per chain: sum (E_n - E_{n-1})^2 / sum (E_n - mean E)^2 of
//               energy__, threshold 0.3
//   ESS         chains.effective_sample_size(i) / total draws < 0.001
//   R-hat       chains.split_potential_scale_reduction(i) > 1.05
// ESS and R-hat are checked for every column whose name does not end in
// "__" (lp__ and the sampler diagnostics are skipped); NaN values (constant
// quantities) are never flagged.  Checks whose column is absent (e.g. no
// treedepth__ for static HMC, fixed_param output) are skipped.
// Report to stdout, exit code 0; unreadable/inconsistent input: message on
// stderr, exit code 1.
#include "csv_chains.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using stanflow::tools::input_error;
using stanflow::tools::ends_with;

const double EBFMI_THRESHOLD = 0.3;
const double ESS_RATIO_MIN = 0.001;
const double RHAT_MAX = 1.05;

const char* usage_text =
    "Check the Stan CSV files of a sampler run for divergent transitions,\n"
    "transitions that hit the maximum treedepth, low E-BFMI, low effective\n"
    "sample size and high split R-hat.\n"
    "Usage: diagnose FILE.csv [FILE.csv ...]\n";

/// 2 significant digits; fixed notation (whole numbers from 10 up),
/// scientific only below 1e-4.
std::string format_2sig(double x) {
  if (std::isnan(x))
    return "nan";
  if (std::isinf(x))
    return x > 0 ? "inf" : "-inf";
  if (x == 0)
    return "0";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1e", x);
  int e = std::atoi(std::strchr(buf, 'e') + 1);  // exponent after rounding
  if (e < -4)
    return buf;
  std::ostringstream ss;
  ss << std::fixed << std::setprecision(e >= 1 ? 0 : 1 - e) << x;
  return ss.str();
}

std::string format_percent(long n, long total) {
  double pct = total > 0 ? 100.0 * n / total : 0.0;
  return format_2sig(pct) + "%";
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i)
    out += (i ? sep : "") + v[i];
  return out;
}

double ebfmi(const Eigen::VectorXd& energy) {
  const Eigen::Index n = energy.size();
  if (n < 2)
    return std::numeric_limits<double>::quiet_NaN();
  double mean = energy.mean();
  double num = 0, den = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    if (i > 0) {
      double d = energy(i) - energy(i - 1);
      num += d * d;
    }
    double c = energy(i) - mean;
    den += c * c;
  }
  return num / den;
}

int run(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help" || a == "help") {
      std::cout << usage_text;
      return 0;
    }
    if (a.size() > 1 && a[0] == '-')
      throw input_error("Error: unrecognized option '" + a + "'.\n"
                        + usage_text);
    files.push_back(a);
  }
  if (files.empty()) {
    std::cout << usage_text;
    return 0;
  }

  stanflow::tools::chain_set set = stanflow::tools::read_chain_set(files);
  stan::mcmc::chains<> chains = set.make_chains();
  const auto& names = set.names();
  const long total = set.total_kept();
  std::ostream& out = std::cout;
  bool problems = false;

  out << "Processing csv files: " << join(files, ", ") << "\n\n";

  // ---- treedepth
  int td = set.index("treedepth__");
  if (td >= 0) {
    out << "Checking sampler transitions treedepth.\n";
    long max_depth = set.files[0].get_long(
        "max_depth", static_cast<long>(set.files[0].metadata.max_depth));
    long hits = 0;
    for (const auto& f : set.files) {
      long depth = f.get_long("max_depth", max_depth);
      for (long r = f.warmup_rows; r < f.total_rows(); ++r)
        if (f.draws(r, td) >= static_cast<double>(depth))
          ++hits;
    }
    if (hits > 0) {
      problems = true;
      out << hits << " of " << total << " (" << format_percent(hits, total)
          << ") transitions hit the maximum treedepth limit of " << max_depth
          << ", or 2^" << max_depth << " leapfrog steps.\n"
          << "Trajectories that are prematurely terminated due to this "
             "limit will result in slow exploration.\n"
          << "For optimal performance, increase this limit.\n\n";
    } else {
      out << "Treedepth satisfactory for all transitions.\n\n";
    }
  }

  // ---- divergences
  int dv = set.index("divergent__");
  if (dv >= 0) {
    out << "Checking sampler transitions for divergences.\n";
    long divergent = 0;
    for (const auto& f : set.files)
      for (long r = f.warmup_rows; r < f.total_rows(); ++r)
        if (f.draws(r, dv) != 0 && !std::isnan(f.draws(r, dv)))
          ++divergent;
    if (divergent > 0) {
      problems = true;
      out << divergent << " of " << total << " ("
          << format_percent(divergent, total)
          << ") transitions ended with a divergence.\n"
          << "These divergent transitions indicate that HMC is not fully "
             "able to explore the posterior distribution.\n"
          << "Try increasing adapt delta closer to 1.\n"
          << "If this doesn't remove all divergences, try to reparameterize "
             "the model.\n\n";
    } else {
      out << "No divergent transitions found.\n\n";
    }
  }

  // ---- E-BFMI
  int en = set.index("energy__");
  if (en >= 0) {
    out << "Checking E-BFMI - sampler transitions HMC potential energy.\n";
    std::vector<std::string> low;
    for (int c = 0; c < chains.num_chains(); ++c) {
      double v = ebfmi(chains.samples(c, en));
      if (v < EBFMI_THRESHOLD) {
        std::ostringstream msg;
        if (chains.num_chains() > 1)
          msg << "Chain " << (c + 1) << ": ";
        msg << "The E-BFMI, " << format_2sig(v)
            << ", is below the nominal threshold of " << EBFMI_THRESHOLD
            << " which suggests that HMC may have trouble exploring the"
               " target distribution.";
        low.push_back(msg.str());
      }
    }
    if (!low.empty()) {
      problems = true;
      for (const auto& l : low)
        out << l << "\n";
      out << "If possible, try to reparameterize the model.\n\n";
    } else {
      out << "E-BFMI satisfactory.\n\n";
    }
  }

  // ---- effective sample size and split R-hat of the model quantities
  std::vector<std::string> low_ess, high_rhat;
  for (int i = 0; i < static_cast<int>(names.size()); ++i) {
    if (ends_with(names[i], "__"))
      continue;
    double ess = chains.effective_sample_size(i);
    if (ess / static_cast<double>(total) < ESS_RATIO_MIN)
      low_ess.push_back(names[i]);
    double rhat = chains.split_potential_scale_reduction(i);
    if (rhat > RHAT_MAX)
      high_rhat.push_back(names[i]);
  }
  if (!low_ess.empty()) {
    problems = true;
    out << "The following parameters had fewer than " << ESS_RATIO_MIN
        << " effective draws per transition:\n"
        << "  " << join(low_ess, ", ") << "\n"
        << "Such low values indicate that the effective sample size "
           "estimators may be biased high and actual performance may be "
           "substantially lower than quoted.\n\n";
  } else {
    out << "Effective sample size satisfactory.\n\n";
  }
  if (!high_rhat.empty()) {
    problems = true;
    out << "The following parameters had split R-hat greater than "
        << RHAT_MAX << ":\n"
        << "  " << join(high_rhat, ", ") << "\n"
        << "Such high values indicate incomplete mixing and biased "
           "estimation.\n"
        << "You should consider regularizing your model with additional "
           "prior information or a more effective parameterization.\n\n";
  } else {
    out << "Split R-hat values satisfactory all parameters.\n\n";
  }

  out << (problems ? "Processing complete.\n"
                   : "Processing complete, no problems detected.\n");
  out.flush();
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
