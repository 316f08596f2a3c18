# bridgesampling's log marginal likelihood of Bayesian logistic regression on given draws,
# for many seeds, in one R process.
#
# Usage: Rscript bridgesampling_fit.R DATA.csv DRAWS_DIR SEEDS OUT.csv
#   DATA.csv: columns y (+-1) and the design matrix's columns (intercept included).
#   DRAWS_DIR/draws_<seed>.csv for seed in 0 .. SEEDS - 1: one row per posterior draw,
#   one column per coefficient (the names become the parameter names).
#   Model: z ~ N(0, 5^2 I), log p(y | z) = sum(log plogis(y * X z)), every constant kept.
#   Writes one row per seed and method ("normal", bridgesampling's default, and "warp3"):
#   logml, re2 (error_measures; NA for warp3, which has none with one repetition), niter
#   and the seconds of bridge_sampler (system.time,
#   elapsed). The first line printed is R's and bridgesampling's versions.
suppressPackageStartupMessages(library(bridgesampling))
args <- commandArgs(trailingOnly = TRUE)
if (length(args) != 4) stop("usage: Rscript bridgesampling_fit.R DATA.csv DRAWS_DIR SEEDS OUT.csv")
table <- read.csv(args[1])
draws_dir <- args[2]
seeds <- as.integer(args[3])
cat(R.version.string, "| bridgesampling", as.character(packageVersion("bridgesampling")), "\n")

data <- list(y = table$y, X = as.matrix(table[, names(table) != "y"]))
prior_sd <- 5

log_posterior <- function(pars, data) {
  sum(dnorm(pars, 0, prior_sd, log = TRUE)) +
    sum(plogis(data$y * (data$X %*% pars), log.p = TRUE))
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
write.csv(do.call(rbind, rows), args[4], row.names = FALSE)
