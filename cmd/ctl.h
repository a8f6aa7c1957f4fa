/* meterctl sub-commands. Each takes the arguments after its name (argv[0]
 * is the sub-command's name) and returns the process exit status:
 * 0 on success, 2 for bad or missing arguments (one line on stderr),
 * 1 for any other failure. */
#ifndef METER_CTL_H
#define METER_CTL_H

int ctl_price_main(int argc, char **argv);
int ctl_lease_cost_main(int argc, char **argv);
int ctl_migrate_main(int argc, char **argv);
int ctl_account_main(int argc, char **argv);
int ctl_key_main(int argc, char **argv);
int ctl_report_main(int argc, char **argv);
int ctl_simulate_main(int argc, char **argv);

#endif
