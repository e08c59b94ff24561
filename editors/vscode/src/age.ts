// "3 min ago" for a run's RFC 3339 start time. No `vscode` import, so it is unit-tested.

export function relativeAge(rfc3339: string, now: number): string {
  const then = Date.parse(rfc3339);
  if (Number.isNaN(then)) {
    return rfc3339;
  }
  const seconds = Math.round((now - then) / 1000);
  if (seconds < 0) {
    return 'just now';
  }
  if (seconds < 45) {
    return seconds <= 1 ? 'just now' : `${seconds} s ago`;
  }
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) {
    return `${minutes} min ago`;
  }
  const hours = Math.round(minutes / 60);
  if (hours < 24) {
    return `${hours} h ago`;
  }
  const days = Math.round(hours / 24);
  if (days < 30) {
    return days === 1 ? 'yesterday' : `${days} days ago`;
  }
  return new Date(then).toISOString().slice(0, 10);
}
