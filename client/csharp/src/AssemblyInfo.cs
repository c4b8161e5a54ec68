using System.Reflection;
using System.Runtime.CompilerServices;

[assembly: AssemblyTitle("Ticketing.Client")]
[assembly: AssemblyDescription("Official .NET client of the Ticketing distributed lock server")]
[assembly: AssemblyVersion("0.1.0")]
[assembly: AssemblyInformationalVersion("0.1.0")]
[assembly: InternalsVisibleTo("Ticketing.Client.Tests")]
