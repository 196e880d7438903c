/*
 * sp_cmd: the subcommands that run in C, without Lua (engine/sp_main.c
 * dispatches to them): `specula theory` (sp_cmd_theory.c) and `specula
 * replay` (sp_cmd_replay.c). argv[0] is the subcommand's name; each returns
 * the process's exit status (0 ok, 2 bad arguments or input).
 */
#ifndef SP_CMD_H
#define SP_CMD_H

int sp_theory_main(int argc, char **argv);
int sp_replay_main(int argc, char **argv);

#endif
