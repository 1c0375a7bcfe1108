// How quotas, usage and durations read on screen.
import type { Quota, QuotaUsage } from "./api";

export function quotaText(quota: Quota | undefined): string {
  const parts: string[] = [];
  if (quota?.calls_per_minute != null) parts.push(`${quota.calls_per_minute} calls/min`);
  if (quota?.run_seconds_per_day != null) parts.push(`${quota.run_seconds_per_day} run-s/day`);
  return parts.length ? parts.join(", ") : "no limit";
}

/** Each limit with how much of it is used now, e.g. "3 of 50 calls this minute". */
export function usedText(quota: Quota | undefined, usage: QuotaUsage | undefined): string[] {
  if (!quota || !usage) return [];
  const lines: string[] = [];
  if (quota.calls_per_minute != null)
    lines.push(`${usage.calls_this_minute} of ${quota.calls_per_minute} calls this minute`);
  if (quota.run_seconds_per_day != null)
    lines.push(`${round(usage.run_seconds_today)} of ${quota.run_seconds_per_day} run-seconds today`);
  return lines;
}

export function ms(value: number | null | undefined): string {
  if (value == null) return "—";
  return value < 1000 ? `${round(value)} ms` : `${round(value / 1000)} s`;
}

export function percent(share: number): string {
  return `${round(share * 100)}%`;
}

function round(value: number): string {
  return String(Math.round(value * 10) / 10);
}
