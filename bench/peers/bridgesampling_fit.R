# bridgesampling's log marginal likelihood on given draws, for many seeds, in one R process.
#
# Usage: Rscript bridgesampling_fit.R MODEL DATA.csv DRAWS_DIR SEEDS OUT.csv [LAM SIGMA]
#   MODEL: "logistic" or "lasso".
#   DATA.csv: column y and the design matrix's columns.
#   DRAWS_DIR/draws_<seed>.csv for seed in 0 .. SEEDS - 1: one row per posterior draw,
#   one column per coefficient (the names become the parameter names).
#   Models, every constant kept:
#     logistic: y in {-1, 1}, z ~ N(0, 5^2 I), log p(y | z) = sum(log plogis(y * X z));
#     lasso: y ~ N(X b, SIGMA^2 I), b_j iid Laplace(rate LAM / SIGMA^2).
#   Writes one row per seed and method ("normal", bridgesampling's default, and "warp3"):
#   logml, re2 (error_measures; NA for warp3, which has none with one repetition), niter
#   and the seconds of bridge_sampler (system.time, elapsed). The first line printed is R's
#   and bridgesampling's versions.
suppressPackageStartupMessages(library(bridgesampling))
args <- commandArgs(trailingOnly = TRUE)
usage <- "usage: Rscript bridgesampling_fit.R MODEL DATA.csv DRAWS_DIR SEEDS OUT.csv [LAM SIGMA]"
if (length(args) < 5) stop(usage)
model <- args[1]
table <- read.csv(args[2])
draws_dir <- args[3]
seeds <- as.integer(args[4])
cat(R.version.string, "| bridgesampling", as.character(packageVersion("bridgesampling")), "\n")

data <- list(y = table$y, X = as.matrix(table[, names(table) != "y"]))

if (model == "logistic") {
  log_posterior <- function(pars, data) {
    sum(dnorm(pars, 0, 5, log = TRUE)) +
      sum(plogis(data$y * (data$X %*% pars), log.p = TRUE))
  }
} else if (model == "lasso") {
  if (length(args) != 7) stop(usage)
  data$sigma <- as.numeric(args[7])
  data$rate <- as.numeric(args[6]) / data$sigma^2
  log_posterior <- function(pars, data) {
    sum(dnorm(data$y, data$X %*% pars, data$sigma, log = TRUE)) +
      length(pars) * log(data$rate / 2) - data$rate * sum(abs(pars))
  }
} else {
  stop(paste("MODEL must be logistic or lasso, got", model))
}

rows <- list()
for (seed in seq_len(seeds) - 1) {
  samples <- as.matrix(read.csv(file.path(draws_dir, sprintf("draws_%d.csv", seed))))
  d <- ncol(samples)
  for (method in c("normal", "warp3")) {
    set.seed(seed)
    seconds <- system.time(
      fit <- bridge_sampler(
        samples = samples, log_posterior = log_posterior, data = data,
        lb = setNames(rep(-Inf, d), colnames(samples)),
        ub = setNames(rep(Inf, d), colnames(samples)),
        method = method, silent = TRUE
      )
    )[["elapsed"]]
    rows[[length(rows) + 1]] <- data.frame(
      seed = seed, method = method, logml = fit$logml,
      re2 = if (method == "warp3") NA else error_measures(fit)$re2,
      niter = fit$niter, seconds = seconds
    )
  }
}
write.csv(do.call(rbind, rows), args[5], row.names = FALSE)
